//! `blockwell status`: ask a running `blockwell serve --control` (or `blockwell mount --control`) for its
//! counters. It always asks for the JSON document; `--json` prints it as it comes, the default prints each
//! export as labelled lines with hit ratios computed from the counts.

use anyhow::{anyhow, bail, Context};
use blockwell_core::dedup::Category;
use blockwell_server::control::{self, Request};
use blockwell_sim::analysis::human_bytes;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server's control socket (default: that of `blockwell serve --control` without a path). A socket
    /// that belongs to another user (not root) is refused.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,

    /// Print every counter of every export as JSON (the cache's and the slow-disk emulator's).
    #[arg(long)]
    pub json: bool,
}

/// The error of a control request that got no answer: a socket of another user is refused as such; otherwise
/// nothing listens there.
pub(crate) fn no_answer(path: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        anyhow!("{e}")
    } else {
        anyhow!("cannot connect to {} ({e}) (is blockwell serve or mount running with --control?)", path.display())
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let path = a.control.unwrap_or_else(control::default_control_path);
    let reply = control::request(&path, Request::StatusJson).map_err(|e| no_answer(&path, e))?;
    if let Some(msg) = reply.strip_prefix("error: ") {
        bail!("{}: {}", path.display(), msg.trim());
    }
    if a.json {
        print!("{reply}");
    } else {
        let v: Value = serde_json::from_str(&reply)
            .with_context(|| format!("{}: the reply is not a status document", path.display()))?;
        print!("{}", text(&v));
    }
    Ok(ExitCode::SUCCESS)
}

/// `hits / total` with four decimals, or `-` when there is nothing to divide.
fn ratio(hits: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.4}", hits as f64 / total as f64)
    }
}

/// `1 request`, `2 requests`.
fn requests(n: u64) -> String {
    format!("{n} request{}", if n == 1 { "" } else { "s" })
}

/// `X zeroed in N requests, Y trimmed in M requests` from `{prefix}zero_writes`, `{prefix}bytes_zeroed`,
/// `{prefix}trims` and `{prefix}bytes_trimmed`.
fn zeroed_trimmed(x: &Value, prefix: &str) -> String {
    let n = |k: &str| x.get(format!("{prefix}{k}")).and_then(Value::as_u64).unwrap_or(0);
    format!(
        "{} zeroed in {}, {} trimmed in {}",
        human_bytes(n("bytes_zeroed")),
        requests(n("zero_writes")),
        human_bytes(n("bytes_trimmed")),
        requests(n("trims"))
    )
}

/// The text form of a `status json` reply: per export, a header line and labelled lines. Each line names the
/// level it counts: the RAM (or content) cache's lines, its traffic with the level below it (`backend`, or
/// `ram <-> dev` over a cache device), the cache device's lines and the origin's.
pub fn text(v: &Value) -> String {
    let n = |x: &Value, k: &str| x.get(k).and_then(Value::as_u64).unwrap_or(0);
    let s = |x: &Value, k: &str| x.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = String::new();
    let none = Vec::new();
    for e in v.get("exports").and_then(Value::as_array).unwrap_or(&none) {
        let size = n(e, "size");
        let dev = e.get("cache_dev").and_then(|t| t.get("path")).and_then(Value::as_str);
        let _ = writeln!(
            out,
            "{}: {}, {} ({} sectors), backend {}{}",
            s(e, "name"),
            s(e, "mode"),
            human_bytes(size),
            size / 512,
            s(e, "backend"),
            dev.map(|d| format!(", cache device {d}")).unwrap_or_default()
        );
        let c = match e.get("cache") {
            Some(c) if c.is_object() => c,
            _ => {
                let _ = writeln!(out, "  cache       off");
                // Without a cache, the requests as the clients made them.
                if let Some(r) = e.get("requests").filter(|x| x.is_object()) {
                    let _ = writeln!(
                        out,
                        "  reads       {}, {}",
                        requests(n(r, "read_requests")),
                        human_bytes(n(r, "read_bytes"))
                    );
                    let flushes = n(r, "flushes");
                    let _ = writeln!(
                        out,
                        "  writes      {}, {}; {}; {flushes} flush{}",
                        requests(n(r, "write_requests")),
                        human_bytes(n(r, "write_bytes")),
                        zeroed_trimmed(r, ""),
                        if flushes == 1 { "" } else { "es" }
                    );
                }
                cache_dev(&mut out, e);
                continue;
            }
        };
        let _ = writeln!(
            out,
            "  cache       {}, {} blocks, {} resident",
            s(e, "policy"),
            n(c, "capacity_blocks"),
            n(c, "resident_blocks")
        );
        let (rh, rm) = (n(c, "read_block_hits"), n(c, "read_block_misses"));
        let (rq, rqh) = (n(c, "read_requests"), n(c, "read_request_hits"));
        let _ = writeln!(
            out,
            "  reads       {}, {rqh} hits, hit ratio {}; blocks {rh} hits, {rm} misses, hit ratio {}",
            requests(rq),
            ratio(rqh, rq),
            ratio(rh, rh + rm)
        );
        let (wh, wm) = (n(c, "write_block_hits"), n(c, "write_block_misses"));
        let _ = writeln!(
            out,
            "  writes      {}; blocks {wh} hits, {wm} misses, hit ratio {}",
            requests(n(c, "write_requests")),
            ratio(wh, wh + wm)
        );
        // NBD CACHE requests (a client asking for a range to be prefetched) are rare: shown when there were any.
        let asked = match n(c, "cache_requests") {
            0 => String::new(),
            k => format!("; {} from clients (NBD CACHE)", requests(k)),
        };
        let _ = writeln!(
            out,
            "  prefetch    {} issued, {} used, {} wasted{asked}",
            n(c, "prefetch_issued"),
            n(c, "prefetch_used"),
            n(c, "prefetch_wasted")
        );
        let _ = writeln!(out, "  evictions   {}", n(c, "evictions"));
        // The cache's traffic with the level below it: the cache device when there is one, else the backend.
        let (label, from, to) = match e.get("cache_below").and_then(Value::as_str) {
            Some("cache_dev") => ("ram <-> dev", " from the cache device", " to it"),
            _ => ("backend", "", ""),
        };
        let _ = writeln!(
            out,
            "  {label:<11} {} read{from} in {}, {} written{to} in {}; {}",
            human_bytes(n(c, "backend_bytes_read")),
            requests(n(c, "backend_reads")),
            human_bytes(n(c, "backend_bytes_written")),
            requests(n(c, "backend_writes")),
            zeroed_trimmed(c, "backend_")
        );
        if let Some(ct) = e.get("content").filter(|x| x.is_object()) {
            let mut line = format!("  content     volume {}", n(ct, "volume"));
            let cats = ct.get("categories").cloned().unwrap_or(Value::Null);
            for cat in Category::ALL {
                let _ = write!(line, ", {} {}", cat.short(), n(&cats, cat.short()));
            }
            let per_insert = ct.get("comparisons_per_insert").and_then(Value::as_f64).unwrap_or(0.0);
            let _ = writeln!(
                out,
                "{line}, full_comparisons {}, comparisons_per_insert {per_insert:.3}, writes_avoided {}",
                n(ct, "full_comparisons"),
                n(ct, "backend_block_writes_avoided")
            );
        }
        match e.get("redcap").filter(|x| x.is_object()) {
            Some(r) => {
                let on = if r.get("active").and_then(Value::as_bool) == Some(true) { "on" } else { "off" };
                let _ = writeln!(out, "  redcap      {on}, {} switches", n(r, "switches"));
            }
            None => {
                let _ = writeln!(out, "  redcap      n/a");
            }
        }
        cache_dev(&mut out, e);
    }
    out
}

/// The lines of an export's cache device (`cache_dev` in the JSON), FlashCache- and dm-cache-style.
fn cache_dev(out: &mut String, e: &Value) {
    let Some(t) = e.get("cache_dev").filter(|x| x.is_object()) else { return };
    let n = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
    let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let pct = t.get("dirty_percent").and_then(Value::as_f64).unwrap_or(0.0);
    // Of its slots, the policy may fill `capacity_blocks`; the rest stay free for writes in flight, evicted
    // dirty blocks and slots waiting for a commit.
    let (slots, capacity) = (n("slots"), n("capacity_blocks"));
    let _ = writeln!(
        out,
        "  cache dev   {}, {}, {slots} slots of {} B ({capacity} for cached blocks, {} reserved for writes in flight), \
         {} cached, {} dirty ({pct:.1} %), cleaner {}",
        s("mode"),
        s("policy"),
        n("block_size"),
        slots.saturating_sub(capacity),
        n("cached_blocks"),
        n("dirty_blocks"),
        s("cleaner")
    );
    let (rh, rm) = (n("read_hits"), n("read_misses"));
    let (wh, wm) = (n("write_hits"), n("write_misses"));
    let _ = writeln!(
        out,
        "  dev reads   blocks {rh} hits, {rm} misses, hit ratio {}; {} promoted, {} uncached requests",
        ratio(rh, rh + rm),
        n("promotions"),
        n("uncached_reads")
    );
    let _ = writeln!(
        out,
        "  dev writes  blocks {wh} hits, {wm} misses, hit ratio {}; {} absorbed by dirty blocks, {} uncached requests",
        ratio(wh, wh + wm),
        n("dirty_write_hits"),
        n("uncached_writes")
    );
    let _ = writeln!(
        out,
        "  cleaning    {} blocks written back in {}; {} dirty and {} clean blocks evicted",
        n("cleaned_blocks"),
        requests(n("clean_writes")),
        n("dirty_evictions"),
        n("demotions")
    );
    let _ = writeln!(
        out,
        "  origin      {} read in {}, {} written in {}; {}",
        human_bytes(n("origin_read_bytes")),
        requests(n("origin_reads")),
        human_bytes(n("origin_write_bytes")),
        requests(n("origin_writes")),
        zeroed_trimmed(t, "origin_")
    );
    let errors =
        ["dev_read_errors", "dev_write_errors", "checksum_failures", "origin_read_errors", "origin_write_errors"];
    let _ = writeln!(
        out,
        "  dev errors  {}; {}",
        errors.iter().map(|k| format!("{} {}", k.replace('_', " "), n(k))).collect::<Vec<_>>().join(", "),
        match t.get("degraded").and_then(Value::as_str) {
            Some(why) => format!("DEGRADED: {why}"),
            None => "healthy".to_string(),
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_device_gets_its_own_lines() {
        let v: Value = serde_json::from_str(
            r#"{"exports": [{"name": "d", "backend": "d.img", "size": 1048576, "mode": "write-back", "policy": "none",
                 "cache": null, "cache_dev": {"path": "c.dev", "mode": "write-back", "policy": "arc", "slots": 100,
                 "capacity_blocks": 84, "block_size": 4096, "origin_read_bytes": 8192, "origin_reads": 1,
                 "origin_write_bytes": 28672, "origin_writes": 2, "origin_trims": 1, "origin_bytes_trimmed": 4096,
                 "cached_blocks": 40, "dirty_blocks": 5, "dirty_percent": 5.0, "cleaner": "none", "read_hits": 3,
                 "read_misses": 1, "write_hits": 2, "write_misses": 2, "promotions": 1, "uncached_reads": 0,
                 "dirty_write_hits": 1, "uncached_writes": 0, "cleaned_blocks": 7, "clean_writes": 2,
                 "dirty_evictions": 1, "demotions": 0, "degraded": "cache device write failed: EIO"}}]}"#,
        )
        .unwrap();
        let t = text(&v);
        assert!(t.starts_with("d: write-back, 1.00 MiB (2048 sectors), backend d.img, cache device c.dev\n"), "{t}");
        assert!(
            t.contains(
                "  cache       off\n  cache dev   write-back, arc, 100 slots of 4096 B (84 for cached blocks, 16 \
                 reserved for writes in flight), 40 cached, 5 dirty (5.0 %)"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "\n  origin      8.00 KiB read in 1 request, 28.00 KiB written in 2 requests; 0 B zeroed in 0 \
                 requests, 4.00 KiB trimmed in 1 request\n"
            ),
            "{t}"
        );
        assert!(t.contains("dev reads   blocks 3 hits, 1 misses, hit ratio 0.7500; 1 promoted"), "{t}");
        assert!(
            t.contains("cleaning    7 blocks written back in 2 requests; 1 dirty and 0 clean blocks evicted"),
            "{t}"
        );
        assert!(t.contains("DEGRADED: cache device write failed: EIO"), "{t}");
    }

    #[test]
    fn labelled_lines_with_hit_ratios() {
        let v: Value = serde_json::from_str(
            r#"{"exports": [
                {"name": "a", "backend": "a.img", "size": 16777216, "mode": "write-through", "policy": "arc",
                 "cache": {"capacity_blocks": 1024, "resident_blocks": 256, "read_requests": 4, "read_request_hits": 1,
                           "read_block_hits": 48, "read_block_misses": 16, "write_requests": 2,
                           "write_block_hits": 0, "write_block_misses": 8, "prefetch_issued": 0, "prefetch_used": 0,
                           "prefetch_wasted": 0, "evictions": 3, "backend_reads": 2, "backend_bytes_read": 65536,
                           "backend_writes": 2, "backend_bytes_written": 32768},
                 "content": null, "delay": null, "redcap": {"active": true, "switches": 2}},
                {"name": "b", "backend": "b.img", "size": 1048576, "mode": "read-only", "policy": "none",
                 "cache": null, "content": null, "delay": null, "redcap": null}
            ]}"#,
        )
        .unwrap();
        let t = text(&v);
        let want = "\
a: write-through, 16.00 MiB (32768 sectors), backend a.img
  cache       arc, 1024 blocks, 256 resident
  reads       4 requests, 1 hits, hit ratio 0.2500; blocks 48 hits, 16 misses, hit ratio 0.7500
  writes      2 requests; blocks 0 hits, 8 misses, hit ratio 0.0000
  prefetch    0 issued, 0 used, 0 wasted
  evictions   3
  backend     64.00 KiB read in 2 requests, 32.00 KiB written in 2 requests; 0 B zeroed in 0 requests, 0 B trimmed in 0 requests
  redcap      on, 2 switches
b: read-only, 1.00 MiB (2048 sectors), backend b.img
  cache       off
";
        assert_eq!(t, want);
    }
}
