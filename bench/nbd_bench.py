#!/usr/bin/env python3
"""NBD server benchmark: `blockwell serve` against nbdkit, measured in the same run with fio's nbd engine.

1. Warm cache (the region is pre-read once through each server before timing), fio over TCP on 127.0.0.1:
   4 KiB random read at QD1 and QD32, 1 MiB sequential read at QD8, each for --seconds:
     blockwell serve --backend IMG --cache <region + 25 %> --policy lru
     nbdkit memory <region>                       (pre-filled with IMG's bytes by nbdcopy)
     nbdkit file IMG --filter=cache cache-on-read=true
   Ratios: blockwell / nbdkit-memory and blockwell / nbdkit-file+cache. fio is pinned to CPU 0 and the servers
   to the other CPUs (--no-pin to let the scheduler place them). The three servers run side by side and
   each of --rounds rounds runs every job on each server in turn; results are medians over the rounds.
2. Emulated HDD (8 ms per request), 4 KiB random read at QD1 on a --hdd-region region, cold pass then warm pass
   (the region read once sequentially in 1 MiB requests in between):
     blockwell serve --backend IMG --delay hdd --cache <region + 50 %> --policy lru
     nbdkit file IMG --filter=delay rdelay=8ms wdelay=8ms
3. REDCAP (seed 000) live: one cold pass of 4 KiB strided reads (4 KiB of every 8 KiB, fio rw=read:4k) at QD1
   over --strided-region MiB of the emulated HDD: no cache, LRU cache, LRU cache + --prefetch redcap.
4. Targets (issue): warm 4 KiB random read IOPS >= 1.5x nbdkit memory at QD32 and >= 1.0x at QD1;
   1 MiB sequential read >= 1.0x. Each is printed as met / MISSED.

Servers listen on 127.0.0.1 only, on free ports, and are killed by PID at the end, even on failure.
Usage: bench/nbd_bench.py [--bin target/release/blockwell] [--quick] [--seconds 15] [--rounds 3]
                          [--region 256] [--hdd-region 64] [--json FILE]
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PROCS = []
# Command prefixes that pin servers and the client to CPUs (set by --pin; see main()).
SERVER_PIN = []
CLIENT_PIN = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {proc.args}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}: {proc.args}")


def start_blockwell(binary, img, args):
    p = subprocess.Popen(
        [*SERVER_PIN, binary, "serve", "--backend", img, "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"(nbd://\S+)", line)
    if not m:
        raise RuntimeError(f"blockwell serve printed {line!r}")
    return p, m.group(1)


def start_nbdkit(args):
    port = free_port()
    p = subprocess.Popen(
        [*SERVER_PIN, "nbdkit", "--foreground", "--exit-with-parent", "-i", "127.0.0.1", "-p", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    PROCS.append(p)
    wait_port(port, p)
    return p, f"nbd://127.0.0.1:{port}/"


def stop(p):
    """SIGTERM; returns what blockwell printed on its way out (its counters), or ""."""
    rest = ""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            if p.stdout:
                rest = p.stdout.read()
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return rest.strip()


def fio(uri, rw, bs, qd, size, seconds=None, name="job"):
    """Runs one fio job; returns (IOPS, MB/s) of its reads."""
    cmd = [
        *CLIENT_PIN, "fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
        f"--iodepth={qd}", f"--size={size}", "--output-format=json", "--randrepeat=0",
    ]
    if seconds:
        cmd += ["--time_based=1", f"--runtime={seconds}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout[out.stdout.index("{"):])
    r = j["jobs"][0]["read"]
    fio.last_cpu = j["jobs"][0]["usr_cpu"] + j["jobs"][0]["sys_cpu"]
    return r["iops"], r["bw_bytes"] / 1e6


def cpu_seconds(pid):
    """User + system CPU time of a process, all its threads (exited ones included)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def warm(uri, size):
    fio(uri, "read", "1M", 8, size, name="warm")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/blockwell")
    ap.add_argument("--quick", action="store_true", help="3 s per job, 64 MiB region, 32 MiB HDD region")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--region", type=int, default=256, help="MiB, warm-cache tests")
    ap.add_argument("--hdd-region", type=int, default=64, help="MiB, emulated-HDD test")
    ap.add_argument("--strided-region", type=int, default=8, help="MiB read once by the REDCAP strided job")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all warm jobs; results are medians")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin: by default (with 2+ CPUs) fio runs on CPU 0 and every server on the other CPUs")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.region, a.hdd_region, a.strided_region = 3, 64, 32, 4
    for tool in ("fio", "nbdkit", "nbdcopy"):
        if not shutil.which(tool):
            sys.exit(f"nbd_bench: {tool} not installed")
    secs = int(a.seconds)
    ncpu = os.cpu_count() or 1
    if not a.no_pin and ncpu >= 2 and shutil.which("taskset"):
        # At queue depth 1 the result otherwise depends on whether the scheduler happens to put client and server
        # on one CPU (a direct switch) or on two (a cross-CPU wake-up per request): 3-4x apart between runs.
        CLIENT_PIN[:] = ["taskset", "-c", "0"]
        SERVER_PIN[:] = ["taskset", "-c", f"1-{ncpu - 1}"]
        print(f"pinned: fio on CPU 0, servers on CPUs 1-{ncpu - 1}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="nbd_bench.") as d:
        img = os.path.join(d, "disk.img")
        with open(img, "wb") as f:
            for _ in range(max(a.region, a.hdd_region)):
                f.write(os.urandom(1 << 20))
        region = f"{a.region}m"
        cache = f"{a.region * 5 // 4}MiB"
        jobs = [("4k randread QD1", "randread", "4k", 1), ("4k randread QD32", "randread", "4k", 32),
                ("1M seqread QD8", "read", "1M", 8)]
        servers = [
            ("blockwell", lambda: start_blockwell(a.bin, img, ["--cache", cache, "--policy", "lru"])),
            ("nbdkit-memory", lambda: start_nbdkit(["memory", str(os.path.getsize(img))])),
            ("nbdkit-file+cache", lambda: start_nbdkit(["--filter=cache", "file", img, "cache-on-read=true"])),
        ]
        # All three servers run at once; each round runs every job on every server in turn, so that load
        # changes on a shared machine hit all servers alike. Each result is the median over the rounds.
        uris, cpu, cpu_med, client, client_med = {}, {}, {}, {}, {}
        for name, start in servers:
            p, uri = start()
            if name == "nbdkit-memory":
                subprocess.run(["nbdcopy", img, uri], check=True)
            warm(uri, region)
            uris[name] = (p, uri)
        samples = {}
        for rnd in range(a.rounds):
            for label, rw, bs, qd in jobs:
                for name, _ in servers:
                    pid = uris[name][0].pid
                    c0 = cpu_seconds(pid)
                    r = fio(uris[name][1], rw, bs, qd, region, secs)
                    us = (cpu_seconds(pid) - c0) / max(r[0] * secs, 1) * 1e6
                    samples.setdefault((name, label), []).append(r)
                    cpu.setdefault((name, label), []).append(us)
                    client.setdefault((name, label), []).append(fio.last_cpu)
                    print(f"  round {rnd + 1} {name:18} {label:18} {r[0]:10.0f} IOPS {r[1]:9.1f} MB/s "
                          f"{us:8.2f} server CPU us/request, fio {fio.last_cpu:5.1f}% CPU", flush=True)
        for key, rs in samples.items():
            rs = sorted(rs)
            results[key] = rs[len(rs) // 2]
            cs = sorted(cpu[key])
            cpu_med[key] = cs[len(cs) // 2]
            ks = sorted(client[key])
            client_med[key] = ks[len(ks) // 2]
        for name, _ in servers:
            counters = stop(uris[name][0])
            if counters:
                print(f"  {name} on exit: {counters}", flush=True)

        hdd = f"{a.hdd_region}m"
        hdd_secs = max(secs, 5)
        hdd_servers = [
            ("blockwell hdd", lambda: start_blockwell(
                a.bin, img, ["--delay", "hdd", "--cache", f"{a.hdd_region * 3 // 2}MiB", "--policy", "lru"])),
            ("nbdkit file+delay", lambda: start_nbdkit(["--filter=delay", "file", img, "rdelay=8ms", "wdelay=8ms"])),
        ]
        for name, start in hdd_servers:
            p, uri = start()
            results[(name, "cold")] = fio(uri, "randread", "4k", 1, hdd, hdd_secs, name="cold")
            warm(uri, hdd)
            results[(name, "warm")] = fio(uri, "randread", "4k", 1, hdd, hdd_secs, name="warmed")
            print(f"  {name:18} cold {results[(name, 'cold')][0]:9.0f} IOPS, warm {results[(name, 'warm')][0]:9.0f} "
                  "IOPS", flush=True)
            counters = stop(p)
            if counters:
                print(f"  {name} on exit: {counters}", flush=True)

        # REDCAP (seed 000) on a live strided read over the emulated HDD, cold, against no cache.
        redcap_state = "n/a"
        strided = [
            ("strided no cache", ["--delay", "hdd", "--cache", "0"]),
            ("strided lru", ["--delay", "hdd", "--cache", "64MiB", "--policy", "lru"]),
            ("strided lru+redcap", ["--delay", "hdd", "--cache", "64MiB", "--policy", "lru", "--prefetch", "redcap"]),
        ]
        for name, args in strided:
            ctl = os.path.join(d, "ctl.sock")
            extra = ["--control", ctl] if "redcap" in name else []
            p, uri = start_blockwell(a.bin, img, args + extra)
            # One pass over the region, not time-based: a second pass would be served from any cache.
            results[(name, "strided")] = fio(uri, "read:4k", "4k", 1, f"{a.strided_region}m", name="strided")
            if extra:
                st = subprocess.run([a.bin, "status", "--control", ctl], capture_output=True, text=True).stdout
                m = re.search(r"redcap (on|off) switches (\d+)", st)
                redcap_state = m.group(0) if m else st.strip()
            print(f"  {name:18} {results[(name, 'strided')][0]:9.0f} IOPS", flush=True)
            stop(p)

    print()
    print(f"Warm cache, {a.region} MiB region, {secs} s per job, median of {a.rounds} interleaved rounds, "
          "fio nbd engine over TCP 127.0.0.1")
    print("| job | blockwell | nbdkit memory | nbdkit file+cache | / memory | / file+cache |")
    print("|---|---|---|---|---|---|")
    for label, _, bs, _ in jobs:
        b, m, c = (results[(n, label)] for n in ("blockwell", "nbdkit-memory", "nbdkit-file+cache"))
        unit, k = ("IOPS", 0) if bs == "4k" else ("MB/s", 1)
        print(f"| {label} ({unit}) | {b[k]:.0f} | {m[k]:.0f} | {c[k]:.0f} | {b[k] / m[k]:.2f}x | {b[k] / c[k]:.2f}x |")
    print()
    print("Server CPU time per request (user + system, all threads; median over rounds, microseconds), and the")
    print("client's (fio's) CPU use during the job (% of one core, median)")
    print("| job | blockwell | nbdkit memory | nbdkit file+cache | memory / blockwell | fio CPU % (bw / mem / file) |")
    print("|---|---|---|---|---|---|")
    for label, _, _, _ in jobs:
        b, m, c = (cpu_med[(n, label)] for n in ("blockwell", "nbdkit-memory", "nbdkit-file+cache"))
        fb, fm, fc = (client_med[(n, label)] for n in ("blockwell", "nbdkit-memory", "nbdkit-file+cache"))
        print(f"| {label} | {b:.2f} | {m:.2f} | {c:.2f} | {m / b:.2f}x | {fb:.0f} / {fm:.0f} / {fc:.0f} |")
    print()
    print(f"Emulated HDD (8 ms/request), 4 KiB random read QD1 on {a.hdd_region} MiB, {hdd_secs} s per pass")
    print("| server | cold IOPS | warm IOPS |")
    print("|---|---|---|")
    for n in ("blockwell hdd", "nbdkit file+delay"):
        print(f"| {n} | {results[(n, 'cold')][0]:.0f} | {results[(n, 'warm')][0]:.0f} |")
    bw, nk = results[("blockwell hdd", "warm")][0], results[("nbdkit file+delay", "warm")][0]
    print(f"blockwell warm / nbdkit+delay warm: {bw / nk:.1f}x")
    print()
    print(f"REDCAP on the emulated HDD: 4 KiB strided read (4 KiB of every 8 KiB) at QD1, one cold pass over "
          f"{a.strided_region} MiB")
    print("| server | IOPS | / no cache |")
    print("|---|---|---|")
    base = results[("strided no cache", "strided")][0]
    for n in ("strided no cache", "strided lru", "strided lru+redcap"):
        print(f"| blockwell {n.split(' ', 1)[1]} | {results[(n, 'strided')][0]:.0f} | "
              f"{results[(n, 'strided')][0] / base:.2f}x |")
    print(f"REDCAP state at the end: {redcap_state}")
    print()
    ratio = lambda label: results[("blockwell", label)][0] / results[("nbdkit-memory", label)][0]
    targets = [("4k randread QD32 >= 1.5x nbdkit memory", ratio("4k randread QD32"), 1.5),
               ("4k randread QD1 >= 1.0x nbdkit memory", ratio("4k randread QD1"), 1.0),
               ("1M seqread >= 1.0x nbdkit memory", ratio("1M seqread QD8"), 1.0)]
    for text, r, want in targets:
        print(f"target {text}: {r:.2f}x {'met' if r >= want else 'MISSED'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{k[0]}|{k[1]}": {"iops": v[0], "mb_s": v[1]} for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
