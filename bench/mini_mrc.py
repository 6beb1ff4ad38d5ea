#!/usr/bin/env python3
"""The error of miniature simulation (`blockwell mrc --policy P --sample R`) against full simulation.

For each trace and policy, the miss ratio at ten cache sizes (footprint/10 to the footprint, in blocks) by full
simulation (`blockwell mrc --policy P`, no sampling) and by miniature simulation at each rate; prints the mean
and largest absolute error per (trace, policy, rate) and the time of each run. Traces: the CloudPhysics trace and
the ARC traces OLTP and P3 (512 B blocks) of ../shared, and the 10M-request Zipf(1.0) trace of
bench/throughput.py (generated). Target (issue #21): mean absolute error <= 0.01 at R = 0.01.

Usage: bench/mini_mrc.py [--bin target/release/blockwell] [--rates 0.01,0.1] [--policies lru,arc,...]
                        [--traces cloudphysics,oltp,p3,zipf-10M] [--json F]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import make_trace  # noqa: E402

POLICIES = "lru,arc,2q,lirs,s3fifo,w-tinylfu,two-list,clock,sieve"


def run(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} failed: {p.stderr[-2000:]}")
    return p.stdout, time.perf_counter() - t


def curve(binary, trace, fmt, bs, policies, sizes, rate=None):
    cmd = [binary, "mrc", "--trace", trace, "--block-size", str(bs), "--policy", policies, "--cache",
           ",".join(f"{s}blocks" for s in sizes), "--json"]
    if fmt:
        cmd += ["--format", fmt]
    if rate is not None:
        cmd += ["--sample", str(rate)]
    out, secs = run(cmd)
    pts = json.loads(out)["points"]
    # Points come in policy × size order; a sampled point stands for round(size · R) / R blocks.
    return {(p["policy"], sizes[i % len(sizes)]): p["miss_ratio"] for i, p in enumerate(pts)}, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/blockwell")
    ap.add_argument("--rates", default="0.01,0.1")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--traces", default="cloudphysics,oltp,p3,zipf-10M", help="which of the traces to run")
    ap.add_argument("--json")
    a = ap.parse_args()
    wanted = a.traces.split(",")
    rates = [float(r) for r in a.rates.split(",")]
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.path.join(here, "..", "..", "shared", "traces")
    out = []
    with tempfile.TemporaryDirectory() as d:
        # (name, path, format, block size): the shared traces (ARC's .lis count 512 B blocks), then Zipf.
        traces = [
            ("cloudphysics", os.path.join(shared, "cloudphysics", "cloudPhysicsIO.csv"), None, 4096),
            ("oltp", os.path.join(shared, "arc", "OLTP.lis.zst"), None, 512),
            ("p3", os.path.join(shared, "arc", "P3.lis.zst"), None, 512),
        ]
        for name, path, _, _ in traces:
            if name in wanted and not os.path.exists(path):
                print(f"SKIPPED LOUDLY: {path} is missing", file=sys.stderr)
        traces = [t for t in traces if t[0] in wanted and os.path.exists(t[1])]
        if "zipf-10M" in wanted:
            zipf = os.path.join(d, "zipf.oracleGeneral")
            make_trace(zipf, 10_000_000, 1_000_000, seed=1)
            traces.append(("zipf-10M", zipf, "oracle", 4096))
        for name, path, fmt, bs in traces:
            cmd = [a.bin, "mrc", "--trace", path, "--block-size", str(bs), "--points", "1", "--json"]
            footprint = json.loads(run(cmd + (["--format", fmt] if fmt else []))[0])["footprint_blocks"]
            sizes = [footprint * i // 10 for i in range(1, 11)]
            full, full_s = curve(a.bin, path, fmt, bs, a.policies, sizes)
            for r in rates:
                mini, mini_s = curve(a.bin, path, fmt, bs, a.policies, sizes, r)
                for pol in a.policies.split(","):
                    errs = [abs(mini[(pol, s)] - full[(pol, s)]) for s in sizes]
                    out.append({"trace": name, "policy": pol, "rate": r, "mae": sum(errs) / len(errs),
                                "max_error": max(errs), "full_s": full_s, "mini_s": mini_s})
    print(f"{'trace':<14} {'policy':<10} {'rate':>6} {'MAE':>8} {'max err':>8} {'full s':>7} {'mini s':>7}")
    for o in out:
        print(f"{o['trace']:<14} {o['policy']:<10} {o['rate']:>6} {o['mae']:>8.4f} {o['max_error']:>8.4f} "
              f"{o['full_s']:>7.1f} {o['mini_s']:>7.2f}")
    for r in rates:
        sel = [o["mae"] for o in out if o["rate"] == r]
        print(f"rate {r}: mean of MAEs {sum(sel) / len(sel):.4f}, worst {max(sel):.4f}"
              + ("  (target <= 0.01: " + ("met" if max(sel) <= 0.01 else "MISSED") + ")" if r == 0.01 else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
