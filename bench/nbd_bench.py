#!/usr/bin/env python3
"""NBD server benchmark: `blockwell serve` against nbdkit, measured in the same run with fio's nbd engine.

1. Warm cache (the region is pre-read once through each server before timing):
   4 KiB random read at QD1 and QD32, 1 MiB sequential read at QD8, each for --seconds:
     blockwell serve --backend IMG --cache <region + 25 %> --policy lru
     nbdkit memory <region>                       (pre-filled with IMG's bytes by nbdcopy)
     nbdkit file IMG --filter=cache cache-on-read=true
   Every blockwell serve is --read-only --shared (the jobs only read; the servers share the image).
   Ratios: blockwell / nbdkit-memory and blockwell / nbdkit-file+cache. Every job runs in each of four setups
   (--transports, --placements): over TCP on 127.0.0.1 and over a Unix socket; with fio on CPU 0 and the
   servers on the other CPUs ("split": every request is a cross-CPU wake-up) and with fio and the servers all
   on CPU 0 ("shared": every request is a context switch on one CPU, so the result is the sum of client and
   server CPU per request). --no-pin leaves placement to the scheduler (one setup per transport). Each server
   runs once per transport, side by side; each of --rounds rounds runs every job of every setup on each server
   in turn; results are medians over the rounds.
2. Emulated HDD (8 ms per request), 4 KiB random read at QD1 on a --hdd-region region, cold pass then warm pass
   (the region read once sequentially in 1 MiB requests in between):
     blockwell serve --backend IMG --delay hdd --cache <region + 50 %> --policy lru
     nbdkit file IMG --filter=delay rdelay=8ms wdelay=8ms
3. REDCAP (seed 000) live: one cold pass of 4 KiB strided reads (4 KiB of every 8 KiB, fio rw=read:4k) at QD1
   over --strided-region MiB of the emulated HDD: no cache, LRU cache, LRU cache + --prefetch redcap.
4. Targets (issue): warm 4 KiB random read IOPS >= 1.5x nbdkit memory at QD32 and >= 1.0x at QD1;
   1 MiB sequential read >= 1.0x. Each is printed as met / MISSED for every setup; a MISSED where fio used
   >= 95 % of its CPU with both servers is marked client-bound (the ratio then measures fio, not the server).

--serve-args adds arguments to every `blockwell serve` (e.g. "--sched normal" to see what a setting is worth
against the same nbdkit run); --warm-only skips parts 2 and 3.

Servers listen on 127.0.0.1 only, on free ports, and are killed by PID at the end, even on failure.
Usage: bench/nbd_bench.py [--bin target/release/blockwell] [--quick] [--seconds 5] [--rounds 3]
                          [--region 256] [--hdd-region 64] [--transports tcp,unix] [--placements split,shared]
                          [--no-pin] [--serve-args ARGS] [--warm-only] [--json FILE]
"""

import argparse
import json
import os
import re
import shlex
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
# fio at this share of its CPU or more with both servers: the job measures the client.
CLIENT_BOUND_PCT = 95
# Extra arguments for every `blockwell serve` (--serve-args).
SERVE_ARGS = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(connect, what, proc, timeout=20.0):
    """Waits until `connect()` succeeds (the server listens), failing if the server exits or times out."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {proc.args}")
        try:
            connect()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {what}: {proc.args}")


def connect_tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()


def connect_unix(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)


def shares(binary, _known={}):
    """Whether `binary` knows `--shared` (builds before the exclusive claims neither need nor take it)."""
    if binary not in _known:
        out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
        _known[binary] = "--shared" in out
    return _known[binary]


def start_blockwell(binary, img, args, unix=None):
    listen = ["--unix", unix] if unix else ["--listen", "127.0.0.1:0"]
    # Every job only reads, and several servers read the one image side by side: read-only, shared claims.
    shared = ["--read-only", "--shared"] if shares(binary) else []
    p = subprocess.Popen(
        [*SERVER_PIN, binary, "serve", "--backend", img, *listen, *shared, *args, *SERVE_ARGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"(nbd(?:\+unix)?://\S+)", line)
    if not m:
        raise RuntimeError(f"blockwell serve printed {line!r}")
    return p, m.group(1)


def start_nbdkit(args, unix=None):
    if unix:
        listen = ["-U", unix]
    else:
        port = free_port()
        listen = ["-i", "127.0.0.1", "-p", str(port)]
    p = subprocess.Popen(
        [*SERVER_PIN, "nbdkit", "--foreground", "--exit-with-parent", *listen, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    PROCS.append(p)
    if unix:
        wait_listening(lambda: connect_unix(unix), unix, p)
        return p, f"nbd+unix:///?socket={unix}"
    wait_listening(lambda: connect_tcp(port), port, p)
    return p, f"nbd://127.0.0.1:{port}/"


def pin(pid, cpus):
    """Moves every thread of a running server to `cpus` (threads it starts later inherit it)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


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
    ap.add_argument("--quick", action="store_true", help="2 s per job, 64 MiB region, 32 MiB HDD region")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--region", type=int, default=256, help="MiB, warm-cache tests")
    ap.add_argument("--hdd-region", type=int, default=64, help="MiB, emulated-HDD test")
    ap.add_argument("--strided-region", type=int, default=8, help="MiB read once by the REDCAP strided job")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all warm jobs; results are medians")
    ap.add_argument("--transports", default="tcp,unix", help="comma list of tcp, unix")
    ap.add_argument("--placements", default="split,shared",
                    help="comma list: split (fio on CPU 0, servers on the others), shared (all on CPU 0)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin: the scheduler places fio and the servers")
    ap.add_argument("--serve-args", default="", help="extra arguments for every blockwell serve, e.g. '--sched normal'")
    ap.add_argument("--warm-only", action="store_true", help="only the warm-cache part (no emulated HDD, no REDCAP)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.region, a.hdd_region, a.strided_region = 2, 64, 32, 4
    for tool in ("fio", "nbdkit", "nbdcopy"):
        if not shutil.which(tool):
            sys.exit(f"nbd_bench: {tool} not installed")
    transports = [t for t in a.transports.split(",") if t]
    placements = [p for p in a.placements.split(",") if p]
    for t in transports:
        if t not in ("tcp", "unix"):
            sys.exit(f"nbd_bench: --transports: unknown transport {t!r} (tcp, unix)")
    for p in placements:
        if p not in ("split", "shared"):
            sys.exit(f"nbd_bench: --placements: unknown placement {p!r} (split, shared)")
    secs = max(1, int(a.seconds))
    SERVE_ARGS[:] = shlex.split(a.serve_args)
    ncpu = os.cpu_count() or 1
    pinning = not a.no_pin and ncpu >= 2 and shutil.which("taskset")
    if not pinning:
        placements = ["unpinned"]
    else:
        # At queue depth 1 the result otherwise depends on whether the scheduler happens to put client and server
        # on one CPU (a direct switch) or on two (a cross-CPU wake-up per request): 3-4x apart between runs.
        # Servers start on the other CPUs; the placement loop moves them.
        SERVER_PIN[:] = ["taskset", "-c", f"1-{ncpu - 1}"]
    server_cpus = {"split": f"1-{ncpu - 1}", "shared": "0"}
    results = {}
    names = ("blockwell", "nbdkit-memory", "nbdkit-file+cache")
    setups = [(t, pl) for pl in placements for t in transports]
    with tempfile.TemporaryDirectory(prefix="nbd_bench.") as d:
        img = os.path.join(d, "disk.img")
        with open(img, "wb") as f:
            for _ in range(max(a.region, a.hdd_region)):
                f.write(os.urandom(1 << 20))
        region = f"{a.region}m"
        cache = f"{a.region * 5 // 4}MiB"
        jobs = [("4k randread QD1", "randread", "4k", 1), ("4k randread QD32", "randread", "4k", 32),
                ("1M seqread QD8", "read", "1M", 8)]
        starts = {
            "blockwell": lambda unix: start_blockwell(a.bin, img, ["--cache", cache, "--policy", "lru"], unix),
            "nbdkit-memory": lambda unix: start_nbdkit(["memory", str(os.path.getsize(img))], unix),
            "nbdkit-file+cache": lambda unix: start_nbdkit(["--filter=cache", "file", img, "cache-on-read=true"],
                                                           unix),
        }
        # Every server runs once per transport, all side by side; each round runs every job of every setup on
        # every server in turn, so that load changes on a shared machine hit all servers alike. Each result is
        # the median over the rounds.
        servers = {}
        for t in transports:
            for name in names:
                unix = os.path.join(d, f"{name}.sock") if t == "unix" else None
                p, uri = starts[name](unix)
                if name == "nbdkit-memory":
                    subprocess.run(["nbdcopy", img, uri], check=True)
                warm(uri, region)
                servers[(t, name)] = (p, uri)
        samples, cpu, client = {}, {}, {}
        for rnd in range(a.rounds):
            for t, pl in setups:
                if pinning:
                    CLIENT_PIN[:] = ["taskset", "-c", "0"]
                    for name in names:
                        pin(servers[(t, name)][0].pid, server_cpus[pl])
                for label, rw, bs, qd in jobs:
                    for name in names:
                        p, uri = servers[(t, name)]
                        c0 = cpu_seconds(p.pid)
                        r = fio(uri, rw, bs, qd, region, secs)
                        us = (cpu_seconds(p.pid) - c0) / max(r[0] * secs, 1) * 1e6
                        key = (t, pl, name, label)
                        samples.setdefault(key, []).append(r)
                        cpu.setdefault(key, []).append(us)
                        client.setdefault(key, []).append(fio.last_cpu)
                        print(f"  round {rnd + 1} {t:4} {pl:8} {name:18} {label:18} {r[0]:10.0f} IOPS {r[1]:9.1f} "
                              f"MB/s {us:8.2f} server CPU us/request, fio {fio.last_cpu:5.1f}% CPU", flush=True)
        median = lambda xs: sorted(xs)[len(xs) // 2]
        warm_res = {k: median(v) for k, v in samples.items()}
        cpu_med = {k: median(v) for k, v in cpu.items()}
        client_med = {k: median(v) for k, v in client.items()}
        for (t, name), (p, _) in servers.items():
            counters = stop(p)
            if counters:
                print(f"  {name} ({t}) on exit: {counters}", flush=True)
        SERVER_PIN[:] = ["taskset", "-c", server_cpus["split"]] if pinning else []
        CLIENT_PIN[:] = ["taskset", "-c", "0"] if pinning else []

        if not a.warm_only:
            hdd = f"{a.hdd_region}m"
            hdd_secs = max(secs, 5)
            hdd_servers = [
                ("blockwell hdd", lambda: start_blockwell(
                    a.bin, img, ["--delay", "hdd", "--cache", f"{a.hdd_region * 3 // 2}MiB", "--policy", "lru"])),
                ("nbdkit file+delay", lambda: start_nbdkit(
                    ["--filter=delay", "file", img, "rdelay=8ms", "wdelay=8ms"])),
            ]
            for name, start in hdd_servers:
                p, uri = start()
                results[(name, "cold")] = fio(uri, "randread", "4k", 1, hdd, hdd_secs, name="cold")
                warm(uri, hdd)
                results[(name, "warm")] = fio(uri, "randread", "4k", 1, hdd, hdd_secs, name="warmed")
                print(f"  {name:18} cold {results[(name, 'cold')][0]:9.0f} IOPS, "
                      f"warm {results[(name, 'warm')][0]:9.0f} IOPS", flush=True)
                counters = stop(p)
                if counters:
                    print(f"  {name} on exit: {counters}", flush=True)

            # REDCAP (seed 000) on a live strided read over the emulated HDD, cold, against no cache.
            redcap_state = "n/a"
            strided = [
                ("strided no cache", ["--delay", "hdd", "--cache", "0"]),
                ("strided lru", ["--delay", "hdd", "--cache", "64MiB", "--policy", "lru"]),
                ("strided lru+redcap",
                 ["--delay", "hdd", "--cache", "64MiB", "--policy", "lru", "--prefetch", "redcap"]),
            ]
            for name, args in strided:
                ctl = os.path.join(d, "ctl.sock")
                extra = ["--control", ctl] if "redcap" in name else []
                p, uri = start_blockwell(a.bin, img, args + extra)
                # One pass over the region, not time-based: a second pass would be served from any cache.
                results[(name, "strided")] = fio(uri, "read:4k", "4k", 1, f"{a.strided_region}m", name="strided")
                if extra:
                    st = subprocess.run([a.bin, "status", "--control", ctl], capture_output=True, text=True).stdout
                    m = re.search(r"redcap +(on|off), (\d+) switches", st)
                    redcap_state = f"redcap {m.group(1)}, {m.group(2)} switches" if m else st.strip()
                print(f"  {name:18} {results[(name, 'strided')][0]:9.0f} IOPS", flush=True)
                stop(p)

    placement_text = {
        "split": "fio on CPU 0, servers on the other CPUs",
        "shared": "fio and servers all on CPU 0",
        "unpinned": "placed by the scheduler",
    }
    for t, pl in setups:
        print()
        print(f"Warm cache over {'TCP 127.0.0.1' if t == 'tcp' else 'a Unix socket'}, {placement_text[pl]}; "
              f"{a.region} MiB region, {secs:g} s per job, median of {a.rounds} interleaved rounds")
        print("| job | blockwell | nbdkit memory | nbdkit file+cache | / memory | / file+cache |"
              " server CPU us/request (bw / mem / file) | fio CPU % (bw / mem / file) |")
        print("|---|---|---|---|---|---|---|---|")
        for label, _, bs, _ in jobs:
            b, m, c = (warm_res[(t, pl, n, label)] for n in names)
            cb, cm, cc = (cpu_med[(t, pl, n, label)] for n in names)
            fb, fm, fc = (client_med[(t, pl, n, label)] for n in names)
            unit, k = ("IOPS", 0) if bs == "4k" else ("MB/s", 1)
            print(f"| {label} ({unit}) | {b[k]:.0f} | {m[k]:.0f} | {c[k]:.0f} | {b[k] / m[k]:.2f}x | "
                  f"{b[k] / c[k]:.2f}x | {cb:.2f} / {cm:.2f} / {cc:.2f} | {fb:.0f} / {fm:.0f} / {fc:.0f} |")
    if not a.warm_only:
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
    print()
    for t, pl in setups:
        ratio = lambda label: warm_res[(t, pl, "blockwell", label)][0] / warm_res[(t, pl, "nbdkit-memory", label)][0]
        targets = [("4k randread QD32 >= 1.5x nbdkit memory", "4k randread QD32", 1.5),
                   ("4k randread QD1 >= 1.0x nbdkit memory", "4k randread QD1", 1.0),
                   ("1M seqread >= 1.0x nbdkit memory", "1M seqread QD8", 1.0)]
        for text, label, want in targets:
            r = ratio(label)
            verdict = "met" if r >= want else "MISSED"
            fb, fm = (client_med[(t, pl, n, label)] for n in ("blockwell", "nbdkit-memory"))
            if r < want and min(fb, fm) >= CLIENT_BOUND_PCT:
                verdict += f" (client-bound: fio at {fb:.0f} % / {fm:.0f} % of its CPU with blockwell / nbdkit memory)"
            print(f"target {text} ({t}, {pl}): {r:.2f}x {verdict}")
    if a.json:
        with open(a.json, "w") as f:
            out = {"|".join(k): {"iops": v[0], "mb_s": v[1]} for k, v in results.items()}
            out.update({"|".join(k): {"iops": v[0], "mb_s": v[1], "server_cpu_us": cpu_med[k],
                                      "fio_cpu_pct": client_med[k]} for k, v in warm_res.items()})
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
