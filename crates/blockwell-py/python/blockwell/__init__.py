"""Blockwell from Python: read block I/O traces, replay them through cache policies, drive a cache step by step.

The engine is the Rust one the ``blockwell`` command runs (``blockwell sim``, ``blockwell serve``): the same
trace readers, policies, prefetchers and admission, and the same numbers.

Quick start::

    import blockwell
    df = blockwell.sim("trace.csv", policies=["lru", "arc"], cache=["1%", "10%"])
    print(df[["policy", "cache_blocks", "block_miss_ratio"]])

See docs/python.md for the whole API.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _native
from ._native import Cache as _NativeCache
from ._native import TraceError

__all__ = [
    "Cache", "PolicyHooks", "Trace", "TraceError", "experiments", "mrc", "over_time", "plot", "read_trace", "sim",
    "sweep", "trace_stats",
    "__version__",
]
__version__: str = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]
Sizes = Union[str, int, Sequence[Union[str, int]]]

#: Columns of a trace batch, in order.
TRACE_COLUMNS = ("time_ns", "volume", "op", "offset", "len")


def _size(s: Union[str, int]) -> str:
    return str(int(s)) if isinstance(s, (int, np.integer)) else str(s)


def _list(x: Union[str, int, Sequence[Union[str, int]]]) -> List[str]:
    if isinstance(x, (str, int, np.integer)):
        return [_size(x)]
    return [_size(v) for v in x]


class Trace:
    """A trace opened for reading: iterate for batches (dicts of numpy arrays ``time_ns``, ``volume``, ``op``
    (0 read, 1 write), ``offset``, ``len``), or call :meth:`to_pandas` for the whole trace in one DataFrame.

    Every format of ``blockwell list`` is read (``format=None`` detects it from the name or first line);
    ``.gz`` and ``.zst`` files are decompressed on the fly. A malformed line raises :class:`TraceError`
    naming ``file:line`` unless ``skip_bad_lines`` allows it.
    """

    def __init__(
        self,
        path: PathLike,
        format: Optional[str] = None,
        *,
        skip_bad_lines: int = 0,
        object_size: Union[str, int] = 4096,
        csv_columns: Optional[str] = None,
        batch_size: int = 65536,
    ) -> None:
        self.path = os.fspath(path)
        self._batches = _native.read_trace(
            self.path,
            format,
            skip_bad_lines=skip_bad_lines,
            object_size=_size(object_size),
            csv_columns=csv_columns,
            batch_size=batch_size,
        )

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        return iter(self._batches)

    @property
    def volumes(self) -> List[str]:
        """Names of the volumes read so far, indexed by the ``volume`` column."""
        return self._batches.volumes

    @property
    def skipped_lines(self) -> int:
        """Malformed lines skipped so far (``skip_bad_lines``)."""
        return self._batches.skipped_lines

    def to_pandas(self):
        """The rest of the trace as one ``pandas.DataFrame`` (columns :data:`TRACE_COLUMNS`; ``op`` as the strings
        ``read``/``write``; ``volume`` as the trace's volume names, categorical). For traces that fit in memory."""
        import pandas as pd

        parts = list(self)
        if parts:
            cols = {c: np.concatenate([p[c] for p in parts]) for c in TRACE_COLUMNS}
        else:
            cols = {
                "time_ns": np.zeros(0, np.uint64),
                "volume": np.zeros(0, np.uint32),
                "op": np.zeros(0, np.uint8),
                "offset": np.zeros(0, np.uint64),
                "len": np.zeros(0, np.uint64),
            }
        df = pd.DataFrame(cols)
        df["op"] = pd.Categorical.from_codes(df["op"].astype(np.int8), categories=["read", "write"])
        # The trace's volume names (formats without volumes name their one volume "0").
        df["volume"] = pd.Categorical.from_codes(df["volume"].astype(np.int64), categories=self.volumes)
        return df


def read_trace(path: PathLike, format: Optional[str] = None, **options) -> Trace:
    """Opens a trace: ``blockwell.read_trace("x.csv").to_pandas()``, or iterate for batches of numpy arrays.
    Options: ``skip_bad_lines``, ``object_size``, ``csv_columns``, ``batch_size`` (see :class:`Trace`)."""
    return Trace(path, format, **options)


#: The columns of :func:`sim`'s DataFrame, as ``blockwell sim --csv`` prints them (``trace`` first): the counters,
#: the ratios (NaN when undefined: no accesses of their kind, no prefetches; never 0), then the settings that
#: produced the row (``preset``, ``prefetch``, ``admission``, ``sequential_cutoff``, ``reads_only``, ``warmup``,
#: ``volumes``). The engine defines them (one schema with the command's CSV).
SIM_COLUMNS: List[str] = ["trace"] + list(_native.sim_columns())

#: The ratio columns of :data:`SIM_COLUMNS` (floats, NaN when undefined).
_SIM_RATIOS = [c for c in SIM_COLUMNS if c.endswith("_ratio") or c in ("prefetch_accuracy", "prefetch_coverage")]
#: The count columns of :data:`SIM_COLUMNS` (integers; ``associativity`` is missing when fully associative).
_SIM_COUNTS = [
    c for c in SIM_COLUMNS
    if c not in _SIM_RATIOS and c not in ("trace", "policy", "preset", "prefetch", "admission", "reads_only",
                                          "warmup", "volumes")
]


def _ratio(m: int, n: int) -> Optional[float]:
    """``m / n``, None when undefined (``n`` is 0): never 0 for a ratio of nothing."""
    return m / n if n else None


def _frame(rows: List[dict], columns: List[str], ratios: List[str]):
    """A DataFrame of ``rows`` with ``columns``, the ``ratios`` columns as floats (NaN when undefined)."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns)
    for c in ratios:
        df[c] = df[c].astype("float64")
    if "associativity" in df:
        df["associativity"] = df["associativity"].astype("Int64")  # missing when fully associative
    return df


def _misses(rd: dict, wr: dict):
    """Totals of a report's read and write counters: blocks, read and write block misses, requests, read and
    write request misses."""
    return (rd["blocks"] + wr["blocks"], rd["blocks"] - rd["block_hits"], wr["blocks"] - wr["block_hits"],
            rd["requests"] + wr["requests"], rd["requests"] - rd["request_hits"],
            wr["requests"] - wr["request_hits"])


def _native_options(options: dict) -> dict:
    """``sim``'s keyword options as ``_native.sim`` takes them: ``preset`` and ``admission`` renamed (they are
    functions there), sizes and the warm-up as text, volumes as a list."""
    out = dict(options)
    for k in ("preset", "admission"):
        if k in out:
            out[k + "_"] = out.pop(k)
    for k in ("sequential_cutoff", "object_size", "warmup"):
        if k in out:
            out[k] = _size(out[k])
    if out.get("volumes") is not None:
        out["volumes"] = list(out["volumes"])
    return out


def _row(trace: str, block_size: int, c: dict, settings: dict) -> dict:
    """The row of a Python policy's cache, as the engine gives its own (``rows`` of ``_native.sim``)."""
    st = c["stats"]
    rd, wr = st["read"], st["write"]
    blocks, rd_miss, wr_miss, requests, rd_req_miss, wr_req_miss = _misses(rd, wr)
    used = st["prefetch_used"]
    row = {
        "trace": trace,
        "policy": c["policy"],
        "cache_blocks": c["cache_blocks"],
        "cache_bytes": c["cache_bytes"],
        "block_size": block_size,
        "requests": requests,
        "blocks": blocks,
        "block_misses": rd_miss + wr_miss,
        "block_miss_ratio": _ratio(rd_miss + wr_miss, blocks),
        "read_blocks": rd["blocks"],
        "read_block_misses": rd_miss,
        "read_block_miss_ratio": _ratio(rd_miss, rd["blocks"]),
        "write_blocks": wr["blocks"],
        "write_block_misses": wr_miss,
        "write_block_miss_ratio": _ratio(wr_miss, wr["blocks"]),
        "request_misses": rd_req_miss + wr_req_miss,
        "request_miss_ratio": _ratio(rd_req_miss + wr_req_miss, requests),
        "read_requests": rd["requests"],
        "read_request_misses": rd_req_miss,
        "write_requests": wr["requests"],
        "write_request_misses": wr_req_miss,
        "prefetch_issued": st["prefetch_issued"],
        "prefetch_used": used,
        "prefetch_late": st["prefetch_late"],
        "prefetch_wasted": st["prefetch_wasted"],
        "prefetch_accuracy": _ratio(used + st["prefetch_late"], st["prefetch_issued"]),
        "prefetch_coverage": _ratio(used, used + rd_miss),
        "admission_rejections": st["admission_rejections"],
        "bypassed": st["bypassed"],
        "evictions": st["evictions"],
        "associativity": c.get("associativity"),
        "sets": c["sets"],
    }
    row.update({k: settings.get(k) for k in SIM_COLUMNS if k not in row})
    return row


def sim(
    trace: PathLike,
    policies: Union[str, type, Sequence[Union[str, type]]] = "lru",
    cache: Sizes = "10%",
    *,
    format: Optional[str] = None,
    block_size: int = 4096,
    preset: str = "default",
    prefetch: str = "none",
    admission: str = "always",
    sequential_cutoff: Union[str, int] = 0,
    associativity: Optional[int] = None,
    reads_only: bool = False,
    warmup: Union[int, str] = 0,
    volumes: Optional[Sequence[str]] = None,
    threads: int = 0,
    skip_bad_lines: int = 0,
    object_size: Union[str, int] = 4096,
    csv_columns: Optional[str] = None,
):
    """Replays ``trace`` through every (policy × cache size) in one pass, as ``blockwell sim`` does, and returns
    a ``pandas.DataFrame`` with one row per cache (columns :data:`SIM_COLUMNS`, those of ``blockwell sim
    --csv`` with ``trace`` first). ``df.attrs`` holds the run's totals (``requests``, ``footprint_blocks``, ...).

    ``policies`` and ``cache`` take what ``--policy`` and ``--cache`` take (``"arc"``, ``"lru-k(k=3)"``;
    ``"64MiB"``, ``"1000blocks"``, ``"5%"`` of the footprint, or an int of bytes). The GIL is released while
    the engine runs, on ``threads`` worker threads (0: one per core). A policy may also be a Python class
    (:class:`PolicyHooks`): it runs after the engine's, request by request through :class:`Cache`, its rows
    after theirs.
    """
    path = os.fspath(trace)
    given = [policies] if isinstance(policies, (str, type)) else list(policies)
    named = [p for p in given if isinstance(p, str)]
    hooked = [p for p in given if not isinstance(p, str)]
    common = _native_options(dict(
        format=format,
        block_size=block_size,
        preset=preset,
        prefetch=prefetch,
        admission=admission,
        sequential_cutoff=sequential_cutoff,
        associativity=associativity,
        reads_only=reads_only,
        warmup=warmup,
        volumes=volumes,
        threads=threads,
        skip_bad_lines=skip_bad_lines,
        object_size=object_size,
        csv_columns=csv_columns,
    ))
    # The engine's policies in one pass; FIFO (cheap) sizes the caches of Python policies when only they run.
    report = json.loads(_native.sim(path, named or ["fifo"], _list(cache), **common))
    rows = [{"trace": path, **r} for r in report["rows"]] if named else []
    if hooked:
        if volumes is not None or associativity is not None:
            raise ValueError("policies: Python policies do not take volumes or associativity yet")
        if not str(warmup).strip().isdigit():
            raise ValueError("warmup: Python policies take a warm-up in requests (an int)")
        warmup = int(warmup)
        sized = report["results"][: len(_list(cache))]
        opts = dict(format=format, skip_bad_lines=skip_bad_lines, object_size=object_size, csv_columns=csv_columns)
        for p in hooked:
            for s in sized:
                c = Cache(p, f"{s['cache_blocks']}blocks", block_size=block_size, preset=preset, prefetch=prefetch,
                          admission=admission, sequential_cutoff=sequential_cutoff)
                _replay(c, Trace(path, **opts), reads_only, warmup)
                result = {**s, "policy": c.policy, "config": None, "stats": c.stats}
                rows.append(_row(path, report["block_size"], result, report["settings"]))
    df = _frame(rows, SIM_COLUMNS, _SIM_RATIOS)
    df.attrs = {k: v for k, v in report.items() if k not in ("results", "rows", "interval_rows")}
    return df


#: Columns of :func:`over_time`, those of ``blockwell sim --interval N --csv`` with ``trace`` first (ratios NaN
#: when undefined; the settings that produced the row last).
INTERVAL_COLUMNS: List[str] = ["trace"] + list(_native.interval_columns())


def over_time(
    trace: PathLike,
    policies: Union[str, Sequence[str]] = "lru",
    cache: Sizes = "10%",
    interval: int = 100_000,
    **options,
):
    """Every cache's counters per interval of ``interval`` requests after warm-up (the last one possibly
    shorter), as ``blockwell sim --interval N --csv``: a ``pandas.DataFrame`` with one row per (cache, interval),
    columns :data:`INTERVAL_COLUMNS`. ``options`` are :func:`sim`'s (``warmup``, ``prefetch``, ``block_size``,
    ...); policies are the engine's (names, not Python classes). The intervals' counts add up to ``sim``'s."""
    if int(interval) < 1:
        raise ValueError("interval: must be at least 1 request")
    names = [policies] if isinstance(policies, str) else list(policies)
    if not all(isinstance(p, str) for p in names):
        raise ValueError("policies: over_time takes the engine's policies by name")
    path = os.fspath(trace)
    report = json.loads(_native.sim(path, names, _list(cache), interval=int(interval), **_native_options(options)))
    rows = [{"trace": path, **r} for r in report["interval_rows"]]
    return _frame(rows, INTERVAL_COLUMNS, [c for c in INTERVAL_COLUMNS if c.endswith("_ratio")])


def _replay(cache: "Cache", trace: Trace, reads_only: bool, warmup: int) -> None:
    """Every request of ``trace`` through ``cache``, as ``sim`` replays it (writes dropped with ``reads_only``; the
    counters zeroed after ``warmup`` requests)."""
    seen = 0
    for b in trace:
        cols = [b["op"], b["offset"], b["len"], b["volume"]]
        if reads_only:
            keep = b["op"] == 0
            cols = [c[keep] for c in cols]
        n = len(cols[0])
        if seen < warmup <= seen + n:
            cut = warmup - seen
            cache.access_many(*(c[:cut] for c in cols))
            cache.reset_stats()
            cols = [c[cut:] for c in cols]
        cache.access_many(*cols)
        seen += n
    if seen <= warmup and warmup > 0:
        cache.reset_stats()  # a warm-up as long as the trace counts nothing, as the engine's replay


def mrc(
    trace: PathLike,
    sizes: Optional[Sizes] = None,
    *,
    points: int = 20,
    block_size: int = 4096,
    reads_only: bool = False,
    sample: Optional[float] = None,
    shards_max: Optional[int] = None,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: Union[str, int] = 4096,
    csv_columns: Optional[str] = None,
    policies: Optional[Union[str, Sequence[str]]] = None,
    preset: str = "default",
    threads: int = 0,
):
    """The LRU miss-ratio curve of ``trace`` in one pass, as ``blockwell mrc``: a ``pandas.DataFrame`` with
    ``cache_blocks``, ``cache_bytes``, ``miss_ratio``, at ``sizes`` (as ``--cache`` takes them) or at ``points``
    even sizes up to the footprint. Exact by default (about 40 bytes per distinct block); ``sample`` (a rate in
    (0, 1]) or ``shards_max`` (blocks tracked) use SHARDS sampling. ``df.attrs`` has ``footprint``,
    ``requests``, ``accesses``, ``exact`` and ``final_rate``.

    With ``policies`` (engine policy names, ``"lru"`` too), the curves of those policies by simulation, as
    ``blockwell mrc --policy``: one cache per (policy, size) in one pass, miniature at ``sample`` < 1 (caches
    scaled by the rate over the SHARDS-sampled blocks, SHARDS_adj on the miss ratio); columns ``policy``,
    ``cache_blocks``, ``cache_bytes``, ``sampled_cache_blocks``, ``miss_ratio``."""
    import pandas as pd

    if policies is not None:
        if shards_max is not None:
            raise ValueError("shards_max: not with policies (give sample, a rate)")
        names = [policies] if isinstance(policies, str) else list(policies)
        r = json.loads(
            _native.mrc_policies(
                os.fspath(trace), names, sizes=None if sizes is None else _list(sizes), points=points,
                sample=1.0 if sample is None else float(sample), block_size=block_size, reads_only=reads_only,
                preset_=preset, threads=threads, format=format, skip_bad_lines=skip_bad_lines,
                object_size=_size(object_size), csv_columns=csv_columns,
            )
        )
        df = pd.DataFrame(r.pop("points"),
                          columns=["policy", "cache_blocks", "cache_bytes", "sampled_cache_blocks", "miss_ratio"])
        df.attrs = r
        return df

    r = json.loads(
        _native.mrc(
            os.fspath(trace),
            sizes=None if sizes is None else _list(sizes),
            points=points,
            block_size=block_size,
            reads_only=reads_only,
            sample=sample,
            shards_max=shards_max,
            format=format,
            skip_bad_lines=skip_bad_lines,
            object_size=_size(object_size),
            csv_columns=csv_columns,
        )
    )
    df = pd.DataFrame(r.pop("points"), columns=["cache_blocks", "cache_bytes", "miss_ratio"])
    df.attrs = r
    return df


def trace_stats(
    trace: PathLike,
    *,
    block_size: int = 4096,
    reuse: bool = True,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: Union[str, int] = 4096,
    csv_columns: Optional[str] = None,
) -> dict:
    """A trace's summary as ``blockwell trace stats --json`` gives it (requests and bytes by op, request sizes,
    volumes, footprint, reuse distances when ``reuse``, time span), as a dict."""
    return json.loads(
        _native.trace_stats(
            os.fspath(trace),
            block_size=block_size,
            reuse=reuse,
            format=format,
            skip_bad_lines=skip_bad_lines,
            object_size=_size(object_size),
            csv_columns=csv_columns,
        )
    )


class PolicyHooks:
    """A replacement policy written in Python. Subclass it (or write any class with these four methods) and pass
    the class where a policy name goes: ``blockwell.Cache(MyPolicy, "64MiB")``, ``blockwell.sim(trace,
    policies=[MyPolicy, "lru"])``. The class is called with the capacity in blocks.

    The engine keeps the set of resident blocks and asks the policy only what to do; a key is an int (the volume in
    the top 16 bits, the block number in the low 48). Every call takes the GIL: expect about a microsecond per
    call on top of the hook's own work (``bench/py_bench.py`` measures it), against tens of nanoseconds for the
    engine's own policies.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    def access(self, key: int) -> None:
        """A demand access to a resident block (a hit)."""

    def insert(self, key: int, prefetched: bool) -> None:
        """A block enters the cache: a demand miss, or a prefetch when ``prefetched``."""

    def evict(self) -> int:
        """The cache is full: return the key of a resident block to evict."""
        raise NotImplementedError

    def remove(self, key: int) -> None:
        """A resident block leaves without an eviction (a write-around write, a TRIM)."""


class Cache:
    """One cache, driven request by request: the engine's cache step (policy, prefetcher, admission, sequential
    cutoff) that ``blockwell sim`` and ``blockwell serve`` run, with every read completing at once.

    >>> c = blockwell.Cache("lru", "64MiB")
    >>> c.access("read", offset=0, length=8192)
    (0, 2)
    >>> c.access("read", 0, 8192)
    (2, 0)

    :meth:`access_many` takes numpy arrays and runs at engine speed with the GIL released.
    """

    def __init__(
        self,
        policy: Union[str, type, PolicyHooks],
        size: Union[str, int],
        *,
        block_size: int = 4096,
        preset: str = "default",
        prefetch: str = "none",
        admission: str = "always",
        sequential_cutoff: Union[str, int] = 0,
    ) -> None:
        self._c = _NativeCache(
            policy,
            _size(size),
            block_size=block_size,
            preset_=preset,
            prefetch=prefetch,
            admission_=admission,
            sequential_cutoff=_size(sequential_cutoff),
        )

    def access(self, op: Union[str, int], offset: int, length: int, volume: int = 0):
        """One request (``op``: ``"read"``/``"write"`` or 0/1) of ``length`` bytes at byte ``offset``. Returns
        ``(hit_blocks, missed_blocks)`` of its blocks."""
        return self._c.access(op, offset, length, volume)

    def access_many(self, op, offset, length, volume=None):
        """Many requests from array-likes of equal length (``op`` 0 read / 1 write, ``offset`` and ``length`` in
        bytes, ``volume``). Returns ``(hit_blocks, missed_blocks)`` summed over them."""
        return self._c.access_many(
            np.ascontiguousarray(op, dtype=np.uint8),
            np.ascontiguousarray(offset, dtype=np.uint64),
            np.ascontiguousarray(length, dtype=np.uint64),
            None if volume is None else np.ascontiguousarray(volume, dtype=np.uint32),
        )

    @property
    def stats(self) -> dict:
        """The counters so far (``read``/``write`` requests, blocks, hits; evictions; prefetch counts; ...)."""
        return json.loads(self._c.stats)

    @property
    def capacity(self) -> int:
        """Capacity in blocks."""
        return self._c.capacity

    @property
    def block_size(self) -> int:
        return self._c.block_size

    @property
    def policy(self) -> str:
        return self._c.policy

    def reset_stats(self) -> None:
        """Zeroes the counters; the contents stay (after a warm-up)."""
        self._c.reset_stats()

    def __len__(self) -> int:
        return len(self._c)

    def __repr__(self) -> str:
        return f"blockwell.Cache({self.policy!r}, {self.capacity} blocks of {self.block_size} B)"


from . import experiments  # noqa: E402
from . import plot  # noqa: E402  (matplotlib is imported when a plot is drawn)
from .sweep import sweep  # noqa: E402  (uses the names above)
