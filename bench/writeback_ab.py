#!/usr/bin/env python3
"""A/B of the write-back write path between two `blockwell` binaries (say, before and after a change).

Each binary serves a 512 MiB origin through a 640 MiB cache device (`--mode write-back --cleaner none`, the default
RAM cache above it), both files in /dev/shm so that the devices do not hide the CPU cost; fio's nbd engine writes
at random over 256 MiB (4 KiB at QD1 and QD16, 64 KiB at QD4) for SECONDS per job. The two binaries alternate,
ROUNDS times; printed: median IOPS of each and the ratio after/before.

Usage: bench/writeback_ab.py BEFORE_BIN AFTER_BIN [ROUNDS=3] [SECONDS=8]
Servers listen on Unix sockets in a temporary directory, are stopped by PID, and the directory is removed.
"""
import json, os, subprocess, sys, time, tempfile, statistics, signal
bins = {"before": sys.argv[1], "after": sys.argv[2]}
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
secs = sys.argv[4] if len(sys.argv) > 4 else "8"
jobs = [("4k-qd1", "4k", 1), ("4k-qd16", "4k", 16), ("64k-qd4", "64k", 4)]
res = {(b, j[0]): [] for b in bins for j in jobs}
def run(name, binary, d):
    origin = os.path.join(d, f"{name}-o.img"); dev = os.path.join(d, f"{name}-c.dev"); sock = os.path.join(d, f"{name}.sock")
    for p in (origin, dev, sock):
        if os.path.exists(p): os.remove(p)
    with open(origin, "wb") as f: f.truncate(512 << 20)
    p = subprocess.Popen([binary, "serve", "--backend", origin, "--cache-dev", dev, "--cache-dev-size", "640MiB",
                          "--mode", "write-back", "--cleaner", "none", "--unix", sock],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(sock): break
        time.sleep(0.05)
    time.sleep(0.3)
    return p, sock
d = tempfile.mkdtemp(dir="/dev/shm")
try:
    for r in range(rounds):
        for b, binary in bins.items():
            p, sock = run(b, binary, d)
            try:
                for (jn, bs, qd) in jobs:
                    out = subprocess.run(["fio", "--name=w", "--ioengine=nbd", f"--uri=nbd+unix:///?socket={sock}",
                        "--rw=randwrite", f"--bs={bs}", f"--iodepth={qd}", "--size=256m", "--time_based",
                        f"--runtime={secs}", "--output-format=json"], capture_output=True, text=True, check=True).stdout
                    iops = json.loads(out[out.index("{"):])["jobs"][0]["write"]["iops"]
                    res[(b, jn)].append(iops)
            finally:
                p.send_signal(signal.SIGTERM); p.wait(timeout=60)
    print(f"{'job':<10} {'before IOPS':>12} {'after IOPS':>12} {'after/before':>13}   (medians of {rounds} rounds, {secs} s each)")
    for (jn, _, _) in jobs:
        a = statistics.median(res[("before", jn)]); b = statistics.median(res[("after", jn)])
        print(f"{jn:<10} {a:>12.0f} {b:>12.0f} {b/a:>13.3f}   before {[round(x) for x in res[('before', jn)]]} after {[round(x) for x in res[('after', jn)]]}")
finally:
    subprocess.run(["rm", "-rf", d])
