#!/usr/bin/env python3
"""The Python package's costs, against the command line and libcachesim, measured in the same run.

1. `blockwell.sim` against `blockwell sim`: the 10M-request Zipf(1.0) trace of bench/throughput.py (oracleGeneral,
   1M blocks), LRU at 10 % of the footprint, one thread, preset libcachesim. The CLI is timed as a whole process;
   Python as the `sim()` call in a process that has already imported blockwell (and pandas), and as a whole
   `python -c` process. Target: the call within 5 % of the CLI.
2. `Cache.access_many` against libcachesim's `process_trace`, LRU at 10 %, both in-process on the same trace
   (libcachesim reading its own binary file, Blockwell numpy arrays of the same requests). Target: >= 2x.
   Miss counts must be equal.
3. A sweep of 32 traces (Zipf, different seeds, --sweep-requests each; LRU, ARC and S3-FIFO at 1 % and 10 %) in one
   process against a Dask LocalCluster of 2 single-threaded workers, started and warm, with Dask's default worker
   settings and with "lean" workers (profiler off, 500 ms tick checks, 1 s memory polling; docs/python.md), and
   against a local pool of 2 processes (the same tasks without Dask). Target: >= 1.8x on 2 cores.
4. A replacement policy written in Python (an OrderedDict LRU, `PolicyHooks`) against the engine's LRU through
   `Cache.access_many` on the first 1M requests: the cost per request of the hooks.
5. An estimate (not a measurement) of 1,000 such traces on a 32-node cluster, from the measured time per task
   and the measured per-task overhead of the cluster run.

Every timing is the fastest of --repeat runs.

Usage: bench/py_bench.py [--bin target/release/blockwell] [--python target/pyenv/bin/python]
                         [--requests 10000000] [--sweep-requests 1000000] [--repeat 3] [--json FILE]
Needs the blockwell wheel installed in --python (scripts/test.sh does it), libcachesim and dask.distributed.
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

SIM_CALL = """
import sys, time, blockwell, pandas
path, size = sys.argv[1], sys.argv[2]
t = time.perf_counter()
df = blockwell.sim(path, "lru", size, format="oracle", preset="libcachesim", threads=1)
print(int(df["block_misses"].iloc[0]), time.perf_counter() - t)
"""

ACCESS_MANY = """
import sys, time, numpy as np, blockwell
path, blocks = sys.argv[1], int(sys.argv[2])
rec = np.fromfile(path, dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nx", "<i8")])
op = np.zeros(len(rec), np.uint8)
offset = rec["id"] * np.uint64(4096)
length = np.full(len(rec), 4096, np.uint64)
c = blockwell.Cache("lru", f"{blocks}blocks", preset="libcachesim")
t = time.perf_counter()
hits, misses = c.access_many(op, offset, length)
print(misses, time.perf_counter() - t)
"""

LCS_CALL = """
import sys, time, libcachesim as lcs
path, size = sys.argv[1], int(sys.argv[2])
r = lcs.TraceReader(trace=path, trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE,
                    reader_init_params=lcs.ReaderInitParam(ignore_obj_size=True))
n = r.get_num_of_req()
t = time.perf_counter()
ratio, _ = lcs.LRU(cache_size=size).process_trace(r)
print(round(ratio * n), time.perf_counter() - t)
"""

HOOKS = """
import sys, time, collections, numpy as np, blockwell
path, blocks, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rec = np.fromfile(path, dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nx", "<i8")], count=n)
op, offset, length = np.zeros(n, np.uint8), rec["id"] * np.uint64(4096), np.full(n, 4096, np.uint64)
class PyLRU(blockwell.PolicyHooks):
    def __init__(self, capacity):
        self.o = collections.OrderedDict()
    def access(self, key):
        self.o.move_to_end(key)
    def insert(self, key, prefetched):
        self.o[key] = None
    def evict(self):
        return self.o.popitem(last=False)[0]
    def remove(self, key):
        del self.o[key]
out = []
for p in ["lru", PyLRU]:
    c = blockwell.Cache(p, f"{blocks}blocks")
    t = time.perf_counter()
    h, m = c.access_many(op, offset, length)
    out += [m, time.perf_counter() - t]
print(*out)
"""

SWEEP = """
import sys, time, json, glob, blockwell
paths, mode = sorted(glob.glob(sys.argv[1])), sys.argv[2]
kw = dict(format="oracle", preset="libcachesim")
t = time.perf_counter()
if mode.startswith("local"):
    df = blockwell.sweep(paths, ["lru", "arc", "s3fifo"], ["1%", "10%"], processes=int(mode[5:]), **kw)
else:
    import dask, distributed
    # "lean": the worker settings docs/python.md recommends for CPU-bound tasks on few cores (no statistical
    # profiler sampling every thread each 10 ms, slower event-loop tick checks and memory polling).
    lean = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "500ms",
            "distributed.worker.memory.monitor-interval": "1s"}
    dask.config.set(lean if mode == "dask-lean" else {})
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        with distributed.Client(c) as client:
            # Started and warm (blockwell and pandas imported), as a cluster is when a sweep comes to it.
            client.run(lambda: (__import__("blockwell"), __import__("pandas")))
            t = time.perf_counter()
            df = blockwell.sweep(paths, ["lru", "arc", "s3fifo"], ["1%", "10%"], client=client, **kw)
print(json.dumps({"seconds": time.perf_counter() - t, "rows": len(df), "errors": int(df["error"].notna().sum()),
                  "misses": [int(x) for x in df["block_misses"]]}))
"""


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{cmd[:3]} failed: {p.stderr[-2000:]}")
    return p.stdout


def best(repeat, f):
    return min((f() for _ in range(repeat)), key=lambda r: r[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/blockwell")
    ap.add_argument("--python", default="target/pyenv/bin/python")
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--sweep-requests", type=int, default=1_000_000)
    ap.add_argument("--sweep-traces", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "zipf1.0.oracleGeneral")
        footprint = make_trace(path, a.requests, a.blocks)
        size = footprint // 10

        def cli():
            t = time.perf_counter()
            o = run([a.bin, "sim", "--trace", path, "--format", "oracle", "--preset", "libcachesim", "--policy",
                     "lru", "--cache", f"{size}blocks", "--threads", "1", "--csv"])
            wall = time.perf_counter() - t
            return int(o.splitlines()[1].split(",")[6]), wall

        def py_call():
            m, s = run([a.python, "-c", SIM_CALL, path, f"{size}blocks"]).split()
            return int(m), float(s)

        def py_process():
            t = time.perf_counter()
            m, _ = run([a.python, "-c", SIM_CALL, path, f"{size}blocks"]).split()
            return int(m), time.perf_counter() - t

        (cm, ct), (pm, pt), (wm, wt) = best(a.repeat, cli), best(a.repeat, py_call), best(a.repeat, py_process)
        assert cm == pm == wm, (cm, pm, wm)
        out["sim"] = {"cli_s": ct, "python_call_s": pt, "python_process_s": wt, "ratio_call": pt / ct,
                      "ratio_process": wt / ct, "misses": cm}

        def am():
            m, s = run([a.python, "-c", ACCESS_MANY, path, str(size)]).split()
            return int(m), float(s)

        def lcs():
            m, s = run([a.python, "-c", LCS_CALL, path, str(size)]).split()
            return int(m), float(s)

        (bm, bt), (lm, lt) = best(a.repeat, am), best(a.repeat, lcs)
        assert bm == lm, (bm, lm)
        out["access_many"] = {"blockwell_s": bt, "libcachesim_s": lt, "speedup": lt / bt, "misses": bm,
                              "ns_per_request": bt / a.requests * 1e9}

        n = min(a.requests, 1_000_000)
        em, et, hm, ht = run([a.python, "-c", HOOKS, path, str(size), str(n)]).split()
        assert em == hm, (em, hm)
        out["python_policy"] = {"requests": n, "engine_s": float(et), "python_s": float(ht),
                                "engine_ns_per_request": float(et) / n * 1e9, "python_ns_per_request": float(ht) / n * 1e9}

        sweep_dir = os.path.join(d, "sweep")
        os.makedirs(sweep_dir)
        for i in range(a.sweep_traces):
            make_trace(os.path.join(sweep_dir, f"t{i:02}.oracleGeneral"), a.sweep_requests, a.blocks // 10, seed=i + 2)
        pattern = os.path.join(sweep_dir, "*.oracleGeneral")
        def sweep(mode):
            runs = [json.loads(run([a.python, "-c", SWEEP, pattern, mode])) for _ in range(a.repeat)]
            return min(runs, key=lambda r: r["seconds"])

        local, pool2, dask, lean = (sweep(m) for m in ("local1", "local2", "dask", "dask-lean"))
        assert local["misses"] == dask["misses"] == pool2["misses"] == lean["misses"]
        assert local["errors"] == dask["errors"] == lean["errors"] == 0
        per_task = local["seconds"] / a.sweep_traces
        overhead = max(0.0, dask["seconds"] - local["seconds"] / 2) / a.sweep_traces
        out["sweep"] = {"traces": a.sweep_traces, "requests_each": a.sweep_requests, "one_process_s": local["seconds"],
                        "local_cluster_2_s": dask["seconds"], "speedup": local["seconds"] / dask["seconds"],
                        "process_pool_2_s": pool2["seconds"], "pool_speedup": local["seconds"] / pool2["seconds"],
                        "lean_cluster_2_s": lean["seconds"], "lean_speedup": local["seconds"] / lean["seconds"],
                        "task_s": per_task, "cluster_overhead_per_task_s": overhead}
        # 1,000 traces of 10M requests (the size of the Zipf trace above), the same six caches, on 32 nodes of 16
        # cores reading oracleGeneral files (24 B per request) from shared storage at 1 GB/s per node.
        cores, nodes, scale = 32 * 16, 32, 10_000_000 / a.sweep_requests
        compute = -(-1000 // cores) * (per_task * scale + overhead)
        io = 1000 * 24 * 10_000_000 / (nodes * 1e9)
        out["estimate_1000_traces_32_nodes"] = {
            "assumes": "1,000 traces of 10M requests, 32 nodes x 16 cores, one task per core, the measured task time "
                       "scaled by requests and the measured cluster overhead per task, 1 GB/s of trace reading per node",
            "compute_s": compute, "read_s": io, "seconds": max(compute, io)}

    s, m, w = out["sim"], out["access_many"], out["sweep"]
    print(f"sim, 10M Zipf LRU 10%: CLI {s['cli_s']:.2f} s, Python call {s['python_call_s']:.2f} s "
          f"({s['ratio_call']:.3f}x; target <= 1.05x: {'met' if s['ratio_call'] <= 1.05 else 'MISSED'}), "
          f"Python process {s['python_process_s']:.2f} s ({s['ratio_process']:.3f}x)")
    print(f"access_many vs libcachesim process_trace: {m['blockwell_s']:.2f} s vs {m['libcachesim_s']:.2f} s "
          f"({m['speedup']:.2f}x; target >= 2x: {'met' if m['speedup'] >= 2 else 'MISSED'}), "
          f"{m['ns_per_request']:.0f} ns/request")
    # The target is for the cluster set up as docs/python.md recommends on few cores (lean workers).
    print(f"sweep of {w['traces']} traces: one process {w['one_process_s']:.1f} s, LocalCluster(2) of lean workers "
          f"{w['lean_cluster_2_s']:.1f} s ({w['lean_speedup']:.2f}x; target >= 1.8x: "
          f"{'met' if w['lean_speedup'] >= 1.8 else 'MISSED'}), with Dask's default settings "
          f"{w['local_cluster_2_s']:.1f} s ({w['speedup']:.2f}x); a local pool of 2 "
          f"processes {w['process_pool_2_s']:.1f} s ({w['pool_speedup']:.2f}x)")
    h = out["python_policy"]
    print(f"Python LRU (PolicyHooks) vs the engine's LRU, {h['requests']} requests: {h['python_ns_per_request']:.0f} vs "
          f"{h['engine_ns_per_request']:.0f} ns/request")
    e = out["estimate_1000_traces_32_nodes"]
    print(f"estimate, 1,000 such traces on 32 nodes x 16 cores: {e['seconds']:.1f} s ({e['assumes']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
