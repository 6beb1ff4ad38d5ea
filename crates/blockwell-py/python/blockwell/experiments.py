"""The seed papers' experiment grids of ``blockwell experiment``, as functions returning DataFrames.

Each function takes the command's options as keyword arguments (``page_cache`` for ``--page-cache``); an
option left at ``None`` takes the command's default, so ``redcap()`` is ``blockwell experiment redcap``. The
settings are checked by the same code as the command's (a bad one raises ``ValueError`` naming the keyword),
the grid runs in the engine with the GIL released on every core (``threads``), and the tables are the
command's ``--csv`` tables, the same numbers. ``blockwell experiment device-caches`` is not here: it drives
the live server with fio, a command-line job.

Example::

    from blockwell import experiments
    df = experiments.prefetch_policies(quick=True, policies=["lru", "arc"])
    df.pivot_table(index="cache_blocks", columns=["policy", "prefetch"], values="hit_ratio")
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, Dict, Optional, Sequence, Union

from . import _native

__all__ = ["dedup", "es_equivalence", "es_levels", "prefetch_policies", "redcap"]

PathLike = Union[str, "os.PathLike[str]"]
Names = Union[str, Sequence[str]]
Sizes = Union[str, int, Sequence[Union[str, int]]]


def _text(x: Union[str, int]) -> str:
    return x if isinstance(x, str) else str(int(x))


def _names(x: Names) -> list:
    """A list option: one spec (commas inside it belong to its parameters) or a sequence of specs."""
    return [x] if isinstance(x, str) else [str(v) for v in x]


def _sizes(x: Sizes) -> list:
    return [_text(x)] if isinstance(x, (str, int)) else [_text(v) for v in x]


def _options(given: Dict[str, Any], lists=(), sizes=(), size=(), numbers=()) -> str:
    """The JSON of the options given (``None`` left out: the command's default)."""
    out: Dict[str, Any] = {}
    for k, v in given.items():
        if v is None:
            continue
        if k in lists:
            v = _names(v)
        elif k in sizes:
            v = _sizes(v)
        elif k in size:
            v = _text(v)
        elif k in numbers:
            v = [v] if isinstance(v, (int, float)) else list(v)
        out[k] = v
    return json.dumps(out)


def _frame(csv_text: str):
    import pandas as pd

    return pd.read_csv(io.StringIO(csv_text))


def _trace_options(format, skip_bad_lines, object_size, csv_columns) -> dict:
    return dict(format=format, skip_bad_lines=skip_bad_lines, object_size=_text(object_size), csv_columns=csv_columns)


def redcap(
    *,
    quick: bool = False,
    benchmarks: Optional[Names] = None,
    procs: Optional[Union[int, Sequence[int]]] = None,
    layouts: Optional[Names] = None,
    configs: Optional[Names] = None,
    scale: Optional[float] = None,
    disk: Optional[str] = None,
    page_cache: Optional[Union[str, int]] = None,
    page_policy: Optional[str] = None,
    page_prefetch: Optional[str] = None,
    scheduler: Optional[str] = None,
    layout_seed: Optional[int] = None,
    runs: Optional[int] = None,
    start_jitter_ms: Optional[float] = None,
    shadow: Optional[str] = None,
    think_jitter_us: Optional[int] = None,
    cpus: Optional[int] = None,
    threads: Optional[int] = None,
):
    """Seed 000 Figure 1 (``blockwell experiment redcap``): the improvement in application time with REDCAP
    over without, one row per (benchmark, processes, layout, configuration) with the mean over ``runs`` and
    its 95 % confidence half-width (``improvement_pct``, ``ci95_pct``), REDCAP's active share and switches,
    disk reads and blocks read with and without. Defaults: five benchmarks × 1-32 processes × five layouts ×
    ``64x128k``, ``128x128k``, five runs on ``wd1200bb`` (minutes on two cores); ``quick=True`` is the
    reduced grid. Results and their comparison with the paper: ``docs/experiments/redcap.md``."""
    opts = _options(
        dict(quick=quick, benchmarks=benchmarks, procs=procs, layouts=layouts, configs=configs, scale=scale,
             disk=disk, page_cache=page_cache, page_policy=page_policy, page_prefetch=page_prefetch,
             scheduler=scheduler, layout_seed=layout_seed, runs=runs, start_jitter_ms=start_jitter_ms,
             shadow=shadow, think_jitter_us=think_jitter_us, cpus=cpus, threads=threads),
        lists=("benchmarks", "layouts", "configs"), size=("page_cache",), numbers=("procs",),
    )
    return _frame(dict(_native.experiment("redcap", opts))["cells"])


def prefetch_policies(
    trace: Optional[PathLike] = None,
    *,
    quick: bool = False,
    workload: Optional[str] = None,
    policies: Optional[Names] = None,
    preset: Optional[str] = None,
    prefetch: Optional[Names] = None,
    cache: Optional[Sizes] = None,
    disk: Optional[str] = None,
    layout: Optional[str] = None,
    scheduler: Optional[str] = None,
    think_us: Optional[int] = None,
    block_size: Optional[int] = None,
    threads: Optional[int] = None,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: Union[str, int] = 4096,
    csv_columns: Optional[str] = None,
):
    """Seed 001 Figures 3-6 and Table 5 (``blockwell experiment prefetch-policies``): hit ratio, disk
    requests (synchronous and read-ahead, with mean sizes), blocks read, prefetch accuracy and execution time
    (``time_ms``) per (policy, prefetcher, cache size), on a generated ``workload`` (default ``loop``) through
    a page cache, or on a block ``trace`` through a block cache. Defaults: the paper's eight policies under
    the ``butt05`` preset, ``none`` vs ``linux24`` read-ahead, 10-100 % of the footprint, ``cheetah9lp``.
    Results and their comparison with the paper: ``docs/experiments/prefetch-policies.md``."""
    opts = _options(
        dict(quick=quick, workload=workload, policies=policies, preset=preset, prefetch=prefetch, cache=cache,
             disk=disk, layout=layout, scheduler=scheduler, think_us=think_us, block_size=block_size,
             threads=threads),
        lists=("policies", "prefetch"), sizes=("cache",),
    )
    traces = [] if trace is None else [os.fspath(trace)]
    tables = _native.experiment(
        "prefetch-policies", opts, traces, **_trace_options(format, skip_bad_lines, object_size, csv_columns)
    )
    return _frame(dict(tables)["points"])


def dedup(
    traces: Optional[Union[PathLike, Sequence[PathLike]]] = None,
    *,
    block_size: Optional[int] = None,
    cache: Optional[Sizes] = None,
    policy: Optional[str] = None,
    policies: Optional[Names] = None,
    policy_size: Optional[Union[str, int]] = None,
    fractions: Optional[Union[float, Sequence[float]]] = None,
    hash_fraction: Optional[float] = None,
    ref_bytes: Optional[int] = None,
    volumes: Optional[Union[int, Sequence[int]]] = None,
    requests: Optional[int] = None,
    blocks: Optional[int] = None,
    alpha: Optional[float] = None,
    write_ratio: Optional[float] = None,
    dup_ratio: Optional[float] = None,
    zero_fraction: Optional[float] = None,
    cross_volume: Optional[float] = None,
    rewrite_ratio: Optional[float] = None,
    pool: Optional[int] = None,
    seed: Optional[int] = None,
    limit: Optional[int] = None,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: Union[str, int] = 4096,
    csv_columns: Optional[str] = None,
) -> dict:
    """Seed 003 Tables 1 and 3, Figures 4-5 (``blockwell experiment dedup``): offset- vs content-based
    caching. Returns a dict of DataFrames, the command's CSV tables: ``sizes`` (read hit rates per cache size,
    silent writes), ``categories`` (Table 1), ``fractions`` (the hash-table fraction sweep), ``policies`` and
    ``volumes`` (unified vs private caches). On a generated workload with content by default (``requests`` to
    ``seed``), or on up to four ``traces`` with content digests (FIU, or CSV with a ``digest=`` column; two or
    more give the unified-vs-private row). Results: ``docs/experiments/dedup.md``."""
    opts = _options(
        dict(block_size=block_size, cache=cache, policy=policy, policies=policies, policy_size=policy_size,
             fractions=fractions, hash_fraction=hash_fraction, ref_bytes=ref_bytes, volumes=volumes,
             requests=requests, blocks=blocks, alpha=alpha, write_ratio=write_ratio, dup_ratio=dup_ratio,
             zero_fraction=zero_fraction, cross_volume=cross_volume, rewrite_ratio=rewrite_ratio, pool=pool,
             seed=seed),
        lists=("policies",), sizes=("cache",), size=("policy_size",), numbers=("fractions", "volumes"),
    )
    if traces is None:
        paths = []
    elif isinstance(traces, (str, os.PathLike)):
        paths = [os.fspath(traces)]
    else:
        paths = [os.fspath(t) for t in traces]
    tables = _native.experiment(
        "dedup", opts, paths, limit=limit, **_trace_options(format, skip_bad_lines, object_size, csv_columns)
    )
    return {name: _frame(text) for name, text in tables}


def _es(kind: str, given: dict) -> list:
    opts = _options(given, lists=("workload",), sizes=("cache",), size=("page_cache",), numbers=("slowdowns",))
    return _native.experiment(kind, opts)


def es_equivalence(
    *,
    workload: Optional[Names] = None,
    scale: Optional[float] = None,
    seed: Optional[int] = None,
    cache: Optional[Sizes] = None,
    slowdowns: Optional[Union[float, Sequence[float]]] = None,
    page_cache: Optional[Union[str, int]] = None,
    mode: Optional[str] = None,
    policy: Optional[str] = None,
    disk: Optional[str] = None,
    dram_ns: Optional[int] = None,
    transfer_ns: Optional[int] = None,
    tolerance: Optional[float] = None,
    threads: Optional[int] = None,
):
    """Seed 002 Table II (``blockwell experiment es-equivalence``): for each workload (``postmark``,
    ``bonnie``), slowdown factor and reference DRAM size, the extended-storage capacity of equal time, one row
    each (``equivalent_blocks``, ``ratio``, empty when no capacity matches). Table II is the mean ``ratio``
    per (workload, slowdown); the break-even price is its inverse. Results: ``docs/experiments/es-equivalence.md``."""
    given = dict(locals())
    return _frame(dict(_es("es-equivalence", given))["tables"])


def es_levels(
    *,
    workload: Optional[Names] = None,
    scale: Optional[float] = None,
    seed: Optional[int] = None,
    cache: Optional[Sizes] = None,
    slowdowns: Optional[Union[float, Sequence[float]]] = None,
    page_cache: Optional[Union[str, int]] = None,
    mode: Optional[str] = None,
    policy: Optional[str] = None,
    disk: Optional[str] = None,
    dram_ns: Optional[int] = None,
    transfer_ns: Optional[int] = None,
    tolerance: Optional[float] = None,
    threads: Optional[int] = None,
):
    """The per-level metrics of :func:`es_equivalence`'s grid (``blockwell experiment es-equivalence
    --levels``): per workload and reference size, the reference (slowdown 1) and a tier of the same size at
    the largest slowdown, one row each, with every counter of the DRAM, tier and disk levels flattened
    (``dram.read_misses``, ``es.time_ns``, ``disk.pages_read``, ...)."""
    given = dict(locals())
    import pandas as pd

    rows = json.loads(dict(_es("es-levels", given))["levels"])
    return pd.json_normalize(rows, sep=".").rename(columns=lambda c: c.replace("report.", "", 1))
