#!/usr/bin/env python3
"""NBD connection costs: `blockwell serve` against nbdkit, measured in the same run.

1. Time to greeting: --connects times, connect over TCP to 127.0.0.1 and read the 18-byte greeting: the median
   time to its first byte, and the median and 99th percentile time to all of it, in microseconds (a server that
   writes the greeting in pieces without TCP_NODELAY waits for a delayed ACK between them).
2. Idle connections: --idle clients connect and open the export (NBD_OPT_GO, so they are in the transmission
   phase), then send nothing. After a second to settle, the server's threads, resident memory, CPU time and
   context switches (voluntary + involuntary, all threads) are measured over --window seconds.

Servers: `blockwell serve --backend IMG --cache 64MiB` (and --baseline BIN, an older build, the same way) and
`nbdkit file IMG`, each alone on the machine in turn. Ratios are Blockwell / nbdkit; the issue's target is a
time to greeting within 2x nbdkit's.

Servers listen on 127.0.0.1 only, on free ports, and are killed by PID at the end, even on failure.
Usage: bench/nbd_conns.py [--bin target/release/blockwell] [--baseline BIN] [--connects 500] [--idle 1000]
                          [--window 10] [--json FILE]
"""

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_bench as nb  # noqa: E402

IHAVEOPT = 0x49484156454F5054
OPT_GO = 7
REP_ACK = 1


def address(uri):
    host, port = uri.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise RuntimeError("server closed the connection")
        b += c
    return b


def greeting_us(addr, n):
    """Microseconds from connect() to the greeting's first byte and to the whole greeting, `n` times each."""
    first, whole = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        with socket.create_connection(addr) as s:
            b = s.recv(18)
            first.append((time.perf_counter() - t0) * 1e6)
            recv_exact(s, 18 - len(b))
            whole.append((time.perf_counter() - t0) * 1e6)
    return sorted(first), sorted(whole)


def open_export(addr, name):
    """A connection in the transmission phase (fixed newstyle, NBD_OPT_GO on `name`)."""
    s = socket.create_connection(addr)
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", len(name)) + name.encode() + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data)
    while True:
        _, _, typ, ln = struct.unpack(">QIII", recv_exact(s, 20))
        recv_exact(s, ln)
        if typ == REP_ACK:
            return s
        if typ & 0x80000000:
            raise RuntimeError(f"NBD_OPT_GO refused: {typ:#x}")


def task_stats(pid):
    """(threads, context switches of every thread, resident MiB) of a process."""
    switches = 0
    tasks = os.listdir(f"/proc/{pid}/task")
    for t in tasks:
        try:
            for line in open(f"/proc/{pid}/task/{t}/status"):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except FileNotFoundError:
            pass
    rss = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            rss = int(line.split()[1]) / 1024
    return len(tasks), switches, rss


def measure(label, proc, uri, export, a):
    addr = address(uri)
    first, whole = greeting_us(addr, a.connects)
    row = {
        "server": label,
        "first_byte_median_us": statistics.median(first),
        "greeting_median_us": statistics.median(whole),
        "greeting_p99_us": whole[int(len(whole) * 0.99) - 1],
    }
    socks = []
    try:
        for _ in range(a.idle):
            socks.append(open_export(addr, export))
        time.sleep(1)
        _, sw0, _ = task_stats(proc.pid)
        cpu0 = nb.cpu_seconds(proc.pid)
        time.sleep(a.window)
        threads, sw1, rss = task_stats(proc.pid)
        cpu1 = nb.cpu_seconds(proc.pid)
        row.update(
            idle=len(socks),
            threads=threads,
            rss_mib=rss,
            cpu_ms_per_s=(cpu1 - cpu0) * 1000 / a.window,
            switches_per_s=(sw1 - sw0) / a.window,
        )
    finally:
        for s in socks:
            s.close()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/blockwell")
    ap.add_argument("--baseline", help="an older blockwell binary, measured the same way")
    ap.add_argument("--connects", type=int, default=500)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("nbdkit"):
        sys.exit("nbd_conns: nbdkit not installed")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.idle + 256
    if hard < need:
        sys.exit(f"nbd_conns: --idle {a.idle} needs {need} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        img = os.path.join(d, "disk.img")
        with open(img, "wb") as f:
            f.truncate(64 << 20)
        servers = [("blockwell", a.bin)] + ([("baseline", a.baseline)] if a.baseline else [])
        try:
            for label, binary in servers:
                args = ["--cache", "64MiB"]
                helptext = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
                if "--max-connections" in helptext:  # builds before the cap had none
                    args += ["--max-connections", str(a.idle + 8)]
                p, uri = nb.start_blockwell(binary, img, args)
                rows.append(measure(label, p, uri, "blockwell", a))
                nb.stop(p)
            p, uri = nb.start_nbdkit(["file", img])
            rows.append(measure("nbdkit", p, uri, "", a))
            nb.stop(p)
        finally:
            for p in nb.PROCS:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    print(f"{a.connects} connects, then {a.idle} idle connections for {a.window:g} s")
    cols = ["server", "first_byte_median_us", "greeting_median_us", "greeting_p99_us", "threads", "rss_mib", "cpu_ms_per_s", "switches_per_s"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    kit = rows[-1]
    for r in rows[:-1]:
        ratio = r["greeting_median_us"] / kit["greeting_median_us"]
        verdict = "met" if ratio <= 2 else "MISSED"
        print(f"{r['server']}: time to greeting {ratio:.2f}x nbdkit's (target <= 2x: {verdict})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
