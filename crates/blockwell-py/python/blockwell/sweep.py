"""Sweeps: many traces × many configurations, on local processes or a Dask cluster.

Each (trace × chunk of policies) is one task running :func:`blockwell.sim` (all of the chunk's policies and
sizes in one pass over the trace). Without a client the tasks run in a process pool on this machine; with a
``dask.distributed.Client`` they run on its cluster (Dask schedules; Blockwell only makes the tasks). Results
come back as they finish and are assembled in the order the traces and chunks were given, so the same sweep
gives the same DataFrame wherever it ran.

A trace that fails (a bad file, a malformed line) yields one row per task, with the trace, the task's policies
(comma-separated) and the ``error``, and never stops the sweep; its counters are missing (``<NA>``: the count
columns are pandas' nullable ``Int64``, so a failure never turns ``cache_blocks`` into floats) and its ratios NaN.

With ``out_dir`` each task that succeeded is also written as a Parquet file named after the trace and a hash of
its configuration and of the trace file's identity (its size, modification time, inode and status-change time);
a sweep run again with the same ``out_dir`` reads those instead of running them again, so a sweep that crashed
resumes where it stopped, and a trace file that was changed or replaced since is run again. A failure is never
kept: the next sweep tries the trace again (after the file is fixed, it gives results).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union


def _identity(trace: str) -> Optional[List[int]]:
    """What tells a version of the trace file from another: size, modification and status-change times (ns) and
    inode (a file rewritten or replaced changes one of them). None when the file cannot be read (the task fails,
    and a failure is never kept)."""
    try:
        st = os.stat(trace)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _task_name(trace: str, policies: List[Any], cache: List[str], kwargs: Dict[str, Any]) -> str:
    """A file name for one task's result: the trace's stem and a hash of everything that decides the result,
    the trace file's identity included."""
    labels = [p if isinstance(p, str) else f"{p.__module__}.{p.__qualname__}" for p in policies]
    key = json.dumps([os.path.abspath(trace), _identity(trace), labels, cache, sorted(kwargs.items())], default=str)
    return f"{Path(trace).name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}.parquet"


def _run(trace: str, policies: List[Any], cache: List[str], kwargs: Dict[str, Any], out: Optional[str]):
    """One task: a DataFrame of results, or one row with the error. Runs in a worker process. Only results are
    kept in ``out``, never a failure."""
    import pandas as pd

    import blockwell

    if out is not None and os.path.exists(out):
        return _typed(pd.read_parquet(out))
    try:
        df = blockwell.sim(trace, policies, cache, **kwargs)
        df["error"] = None
    except Exception as e:  # noqa: BLE001 - a failed trace is a result, never the end of the sweep
        labels = ",".join(p if isinstance(p, str) else p.__qualname__ for p in policies)
        row = {"trace": trace, "policy": labels, "error": f"{type(e).__name__}: {e}"}
        return _typed(pd.DataFrame([row], columns=blockwell.SIM_COLUMNS + ["error"]))
    df = _typed(df)
    df.attrs = {}
    if out is not None:
        tmp = f"{out}.tmp{os.getpid()}"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, out)
    return df


def _typed(df):
    """``df`` with the count columns as nullable ``Int64`` (missing in a failed trace's row, never floats) and the
    ratio columns as floats (NaN when undefined or missing)."""
    import blockwell

    for c in blockwell._SIM_COUNTS:
        df[c] = df[c].astype("Int64")
    for c in blockwell._SIM_RATIOS:
        df[c] = df[c].astype("float64")
    return df


def sweep(
    traces: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    policies: Union[str, type, Sequence[Union[str, type]]] = "lru",
    cache: Union[str, int, Sequence[Union[str, int]]] = "10%",
    *,
    client: Any = None,
    policies_per_task: Optional[int] = None,
    processes: Optional[int] = None,
    out_dir: Optional[Union[str, os.PathLike]] = None,
    **sim_options: Any,
):
    """Runs :func:`blockwell.sim` over every trace (paths, or one glob pattern) × every chunk of
    ``policies_per_task`` policies (default: all in one task per trace), and returns one ``pandas.DataFrame``:
    :data:`blockwell.SIM_COLUMNS` plus ``error`` (None, or why the trace failed); the count columns are nullable
    ``Int64`` (``<NA>`` in a failed trace's row), the ratios floats (NaN when undefined).

    ``client``: a ``dask.distributed.Client`` to run on its cluster; None runs on ``processes`` local processes
    (default: one per core). Each task simulates on one thread (``threads=1`` unless given), so parallelism comes
    from running tasks side by side. ``out_dir``: keep each task's result as Parquet there and reuse it when the
    sweep runs again on the same trace file (same size, modification time and inode); failures are not kept. ``sim_options`` go to every :func:`blockwell.sim` call (``block_size``, ``prefetch``, ...).
    """
    import glob

    import pandas as pd

    import blockwell
    from blockwell import _list

    if isinstance(traces, (str, os.PathLike)):
        t = os.fspath(traces)
        traces = sorted(glob.glob(t)) if any(c in t for c in "*?[") else [t]
    traces = [os.fspath(t) for t in traces]
    given = [policies] if isinstance(policies, (str, type)) else list(policies)
    if not traces or not given:
        raise ValueError("traces: nothing to sweep" if not traces else "policies: nothing to sweep")
    step = policies_per_task or len(given)
    chunks = [given[i : i + step] for i in range(0, len(given), step)]
    sizes = _list(cache)
    options = {"threads": 1, **sim_options}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
    tasks: List[Tuple[str, List[Any], List[str], Dict[str, Any], Optional[str]]] = []
    for t in traces:
        for c in chunks:
            out = None if out_dir is None else os.path.join(os.fspath(out_dir), _task_name(t, c, sizes, options))
            tasks.append((t, c, sizes, options, out))

    results: List[Any] = [None] * len(tasks)
    if client is None:
        with ProcessPoolExecutor(max_workers=processes or os.cpu_count() or 1) as pool:
            futures = {pool.submit(_run, *task): i for i, task in enumerate(tasks)}
            for f in as_completed(futures):
                results[futures[f]] = f.result()
    else:
        from distributed import as_completed as dask_completed

        futures = [client.submit(_run, *task, pure=False) for task in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        for f in dask_completed(futures):
            results[index[f.key]] = f.result()
    df = _typed(pd.concat(results, ignore_index=True))
    return df[blockwell.SIM_COLUMNS + ["error"]]
