#!/usr/bin/env python3
"""Cross-check Blockwell's miss ratios against the libcachesim PyPI package (0.3.5).

Generates traces (uniform, Zipf 0.8 and 1.2, a loop larger than most caches, a scan + hot-set mix) in
libCacheSim's oracleGeneral binary form (one 4 KiB block per record, next-access times filled in), runs every
policy both tools implement at several cache sizes (tiny ones included) through libcachesim and through
`blockwell sim --preset libcachesim`, and requires the miss counts to be equal. Then the admission rules both
implement, in front of LRU, FIFO and CLOCK: `prob:P` against `ProbAdmissioner(P)` (equal), and `bloom` against
`BloomFilterAdmissioner` where Blockwell's bounded filter is never cleared (equal but for its false positives).
Every libcachesim run starts from the generator state a fresh thread has (libcachesim 0.3.5's thread-local
Lehmer64 state, 0xdeadbeef), so that policies and admission rules that draw random numbers do not depend on the
runs before them. Policies the package does not build (MRU) run as a Python transcription of their libCacheSim C
file inside libcachesim's own request loop (`PluginCache`).
`--long N` adds a Zipf(1.0) trace of N accesses (for policies whose behaviour changes over millions of
accesses, as LHD's does).

Usage: scripts/crosscheck_libcachesim.py [--bin target/release/blockwell] [--quick] [--policies P,...] [--long N]
Prints one line per (trace, policy, size) mismatch and a closing `N passed, M failed` line; exits 1 on any
mismatch.
"""

import argparse
import collections
import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import libcachesim as lcs
except ImportError:  # scripts/test.sh installs it
    sys.exit("libcachesim is not installed: pip install libcachesim==0.3.5")

# Blockwell policy name -> libcachesim class name. Every policy both implement.
PAIRS = {
    "lru": "LRU",
    "fifo": "FIFO",
    "clock": "Clock",
    "sieve": "Sieve",
    "s3fifo": "S3FIFO",
    "arc": "ARC",
    "2q": "TwoQ",
    "lirs": "LIRS",
    "lru-k": "LRUK",
    "mq": "MQ",
    "w-tinylfu": "WTinyLFU",
    "opt": "Belady",
    "lhd": "LHD",
    "hyperbolic": "Hyperbolic",
    "random": "Random",
    "clock-pro": "ClockPro",
    "lecar": "LeCaR",
    "cacheus": "Cacheus",
}

# libcachesim 0.3.5 aborts the whole process for S3FIFO when the small queue (10 % of the cache) rounds to 0
# blocks; Blockwell's libcachesim preset caches nothing there and is compared from 10 blocks up. Its WTinyLFU
# aborts likewise when the SLRU's probation segment rounds to 0 (c <= 4 blocks).
MIN_SIZE = {"s3fifo": 10, "w-tinylfu": 5}

# Admission rules both implement, checked in front of these policies (libcachesim calls its admissioner on every
# miss of a policy built on cache_get_base): Blockwell spec -> (libcachesim admissioner, cache sizes, allowed
# absolute difference of the miss ratio). `prob:P` draws what libcachesim 0.3.5 draws (its Lehmer generator from
# 0xdeadbeef, replayed), so it is exact at every size. libcachesim's "bloom filter" is an exact set of every object
# that ever missed; Blockwell's `bloom` is a Bloom filter of 2 x capacity keys cleared when full, so they are
# compared where it is never cleared (capacity >= half the footprint), the difference then being its false
# positives (<= 0.82 %); below that they differ by design (docs/correctness.md gives the numbers).
ADMISSION_POLICIES = {"lru": "LRU", "fifo": "FIFO", "clock": "Clock"}
ADMISSION = {
    "prob:0.3": (lambda: lcs.ProbAdmissioner(0.3), "all", 0.0),
    "prob:0.85": (lambda: lcs.ProbAdmissioner(0.85), "all", 0.0),
    "bloom": (lambda: lcs.BloomFilterAdmissioner(), "half-footprint", 0.0005),
}


def mru_plugin(size):
    """libCacheSim's MRU.c (not built into the package) as PluginCache hooks: a hit moves the object to the head,
    a miss inserts it at the head after the eviction hook removed the head."""
    def init(_params):
        return collections.OrderedDict()  # last = head (most recent)

    def hit(q, req):
        q.move_to_end(req.obj_id)

    def miss(q, req):
        q[req.obj_id] = True

    def evict(q, _req):
        return q.popitem(last=True)[0]

    def remove(q, obj_id):
        q.pop(obj_id, None)

    def free(q):
        q.clear()

    return lcs.PluginCache(cache_size=size, cache_init_hook=init, cache_hit_hook=hit, cache_miss_hook=miss,
                           cache_eviction_hook=evict, cache_remove_hook=remove, cache_free_hook=free,
                           cache_name="MRU")


# Policies libcachesim 0.3.5 has in C but does not build: Blockwell policy name -> PluginCache constructor.
MODELS = {"mru": mru_plugin}

# libcachesim 0.3.5's thread-local Lehmer64 generator starts at 0xdeadbeef in every thread; set_rand_seed(s) sets
# its state to s. Reset before each run, so that a run does not depend on the draws of the runs before it.
_LIB = ctypes.CDLL(lcs.libcachesim_python.__file__)
LCS_INITIAL_RAND_STATE = 0xDEADBEEF


def traces(quick):
    """Deterministic synthetic block-id sequences."""
    rng = np.random.default_rng(20261122)
    n = 30_000 if quick else 100_000
    out = {}
    out["uniform"] = rng.integers(0, 5_000, n)
    for a in (0.8, 1.2):
        # Zipf over a finite population by inverse CDF, ranks permuted over block numbers.
        pop = 20_000
        w = 1.0 / np.arange(1, pop + 1) ** a
        cdf = np.cumsum(w) / w.sum()
        ranks = np.searchsorted(cdf, rng.random(n))
        perm = rng.permutation(pop)
        out[f"zipf{a}"] = perm[ranks]
    out["loop"] = np.arange(n) % 1_200
    hot = rng.integers(0, 500, n)
    scan = 100_000 + np.arange(n)
    out["scan-hot"] = np.where(rng.random(n) < 0.7, hot, scan)
    return out


def long_trace(n):
    """Zipf(1.0) over n / 40 blocks, ranks permuted: long enough for LHD's reconfigurations (every 2^20 accesses)."""
    rng = np.random.default_rng(20261125)
    pop = max(1, n // 40)
    cdf = np.cumsum(1.0 / np.arange(1, pop + 1))
    cdf /= cdf[-1]
    return rng.permutation(pop)[np.searchsorted(cdf, rng.random(n))]


def write_oracle(path, ids):
    """oracleGeneral records (time = index, id, 4096 bytes, index of the next access or -1); returns the footprint."""
    ids = np.asarray(ids, dtype=np.uint64)
    order = np.argsort(ids, kind="stable")
    nxt = np.full(len(ids), -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    rec = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nx", "<i8")])
    rec["t"] = np.arange(len(ids), dtype=np.uint32)
    rec["id"] = ids
    rec["sz"] = 4096
    rec["nx"] = nxt
    rec.tofile(path)
    return int(np.unique(ids).size)



def lcs_misses(path, cls, size, n, admissioner=None):
    """Misses of libcachesim class `cls` (or of a MODELS constructor) at `size` objects, optionally behind an
    admissioner, from a reset random generator."""
    reader = lcs.TraceReader(
        trace=path,
        trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE,
        reader_init_params=lcs.ReaderInitParam(ignore_obj_size=True),
    )
    _LIB.set_rand_seed(ctypes.c_uint64(LCS_INITIAL_RAND_STATE))
    kw = {} if admissioner is None else {"admissioner": admissioner()}
    cache = cls(size) if callable(cls) else getattr(lcs, cls)(cache_size=size, **kw)
    ratio, _ = cache.process_trace(reader)
    return round(ratio * n)


def blockwell_misses(args, path, policies, sizes, extra=()):
    """{(policy, cache blocks): misses} from one `blockwell sim --json` run, or None (after printing why)."""
    out = subprocess.run(
        [
            args.bin, "sim", "--trace", path, "--format", "oracle", "--preset", "libcachesim",
            "--policy", ",".join(policies), "--cache", ",".join(f"{s}blocks" for s in sizes), "--json", *extra,
        ],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        print(f"FAIL {path}: blockwell exited {out.returncode}: {out.stderr.strip()}")
        return None
    ours = {}
    for r in json.loads(out.stdout)["results"]:
        s = r["stats"]
        ours[(r["policy"], r["cache_blocks"])] = sum(s[op]["blocks"] - s[op]["block_hits"] for op in ("read", "write"))
    return ours


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/blockwell")
    ap.add_argument("--quick", action="store_true", help="shorter traces")
    ap.add_argument("--policies", default=",".join([*PAIRS, *MODELS]), help="comma-separated subset")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also a Zipf(1.0) trace of N accesses over N/40 blocks, at 1000 blocks and 1 %% and 50 %% "
                         "of its footprint (for LHD's reconfigurations, every 2^20 accesses, and Hyperbolic's table "
                         "doubling past 131,072 blocks)")
    args = ap.parse_args()
    wanted = [p for p in args.policies.split(",") if p]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as d:
        all_traces = traces(args.quick)
        if args.long:
            all_traces["zipf1.0-long"] = long_trace(args.long)
        for name, ids in all_traces.items():
            path = os.path.join(d, f"{name}.oracleGeneral")
            long = name == "zipf1.0-long"
            footprint = write_oracle(path, ids)
            n = len(ids)
            if long:
                sizes = sorted({1000, max(1, footprint // 100), max(1, footprint // 2)})
            else:
                sizes = sorted({1, 2, 3, 10, 100, 1000, max(1, footprint // 100), max(1, footprint // 10)})
            ours = blockwell_misses(args, path, wanted, sizes)
            if ours is None:
                failed += len(wanted) * len(sizes)
                continue
            for pol in wanted:
                for size in sizes:
                    if size < MIN_SIZE.get(pol, 1):
                        continue
                    mine = ours[(pol, size)]
                    theirs = lcs_misses(path, MODELS.get(pol) or PAIRS[pol], size, n)
                    ok = mine == theirs
                    if long:
                        print(f"    {pol} {size} blocks: blockwell {mine}, libcachesim {theirs} misses")
                    if ok:
                        passed += 1
                    else:
                        failed += 1
                        print(f"FAIL {name} {pol} {size} blocks: blockwell {mine / n:.6f} ({mine} misses), "
                              f"libcachesim {theirs / n:.6f} ({theirs} misses)")
            print(f"  {name}: {n} accesses, {footprint} distinct blocks, sizes {sizes}: checked", flush=True)
            adm_policies = [p for p in wanted if p in ADMISSION_POLICIES]
            for spec, (admissioner, which, tolerance) in ADMISSION.items() if adm_policies else ():
                adm_sizes = sizes if which == "all" else sorted({math.ceil(footprint / 2), footprint})
                ours = blockwell_misses(args, path, adm_policies, adm_sizes, ["--admission", spec])
                if ours is None:
                    failed += len(adm_policies) * len(adm_sizes)
                    continue
                for pol in adm_policies:
                    for size in adm_sizes:
                        mine = ours[(pol, size)]
                        theirs = lcs_misses(path, ADMISSION_POLICIES[pol], size, n, admissioner)
                        if abs(mine - theirs) / n <= tolerance:
                            passed += 1
                        else:
                            failed += 1
                            print(f"FAIL {name} {pol} --admission {spec} {size} blocks: blockwell {mine / n:.6f} "
                                  f"({mine} misses), libcachesim {theirs / n:.6f} ({theirs} misses)")
                print(f"  {name}: admission {spec} in front of {','.join(adm_policies)}, sizes {adm_sizes}: checked",
                      flush=True)
    print(f"crosscheck: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
