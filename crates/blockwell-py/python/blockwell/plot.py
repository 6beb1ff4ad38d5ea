"""Plots of Blockwell results with matplotlib: miss-ratio curves, policy comparisons and miss ratios over time.

Each function draws on ``ax`` (a new figure's axes when None) and returns the axes, so plots compose and save
with matplotlib as usual. They draw what ``blockwell mrc --plot`` and ``blockwell sim --interval N --plot`` draw:
curves through the table's sizes with each size marked, miss ratios per interval as steps, and the legend beside
the axes, where it covers no data::

    ax = blockwell.plot.mrc(blockwell.mrc("trace.csv"))
    blockwell.plot.policies(blockwell.sim("trace.csv", ["lru", "arc"], ["1%", "5%", "10%"]), ax=ax)
    ax.figure.savefig("mrc.png")
"""

from __future__ import annotations

from typing import Any, Optional


def _axes(ax: Any):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    # Constrained layout makes room for the legend beside the axes.
    _, ax = plt.subplots(figsize=(9, 4.5), layout="constrained")
    return ax


def _legend(ax):
    """The legend outside the axes, on their right, so that it covers no data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _mib(blocks, block_size):
    return blocks * block_size / 2**20


def mrc(df, *, ax: Any = None, label: Optional[str] = None, bytes: bool = True):
    """The miss-ratio curve of :func:`blockwell.mrc` (``cache_blocks``/``cache_bytes`` against ``miss_ratio``),
    as a line with its points marked (circles, as ``blockwell mrc --plot``). ``bytes``: the x axis in MiB, else in blocks."""
    ax = _axes(ax)
    x = df["cache_bytes"] / 2**20 if bytes else df["cache_blocks"]
    exact = df.attrs.get("exact", True)
    ax.plot(x, df["miss_ratio"], marker="o", label=label or ("LRU (exact)" if exact else "LRU (SHARDS)"))
    ax.set_xlabel("cache size (MiB)" if bytes else "cache size (blocks)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, max(1.0, float(df["miss_ratio"].max()) * 1.05) if len(df) else 1.0)
    ax.grid(True, alpha=0.3)
    _legend(ax)
    return ax


def policies(df, metric: str = "block_miss_ratio", *, ax: Any = None, bytes: bool = True):
    """One line per policy of a :func:`blockwell.sim` or :func:`blockwell.sweep` DataFrame: ``metric`` against
    the cache size. Rows of several traces are drawn as one line per (trace, policy)."""
    ax = _axes(ax)
    keys = ["trace", "policy"] if "trace" in df and df["trace"].nunique() > 1 else ["policy"]
    ok = df[df["error"].isna()] if "error" in df else df
    for key, rows in ok.groupby(keys, sort=False):
        rows = rows.sort_values("cache_blocks")
        x = _mib(rows["cache_blocks"], rows["block_size"]) if bytes else rows["cache_blocks"]
        name = " / ".join(str(k) for k in key) if isinstance(key, tuple) else str(key)
        ax.plot(x, rows[metric], marker="o", label=name)
    ax.set_xlabel("cache size (MiB)" if bytes else "cache size (blocks)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(True, alpha=0.3)
    _legend(ax)
    return ax


def over_time(df, metric: str = "block_miss_ratio", *, ax: Any = None):
    """One line per cache of a :func:`blockwell.over_time` DataFrame: ``metric`` per interval, held over the
    interval (a step at each interval's end), as ``blockwell sim --interval N --plot``. Lines are
    named policy / cache size in blocks."""
    ax = _axes(ax)
    for (policy, blocks), rows in df.groupby(["policy", "cache_blocks"], sort=False):
        rows = rows.sort_values("interval")
        # Each interval's value held over the interval, the first from where counting starts (its end less its
        # requests), as the command line draws it.
        x = [int(rows["end_request"].iloc[0] - rows["requests"].iloc[0])] + rows["end_request"].tolist()
        y = [rows[metric].iloc[0]] + rows[metric].tolist()
        ax.step(x, y, where="pre", label=f"{policy} / {blocks} blocks")
    ax.set_xlabel("requests (after warm-up)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(0, 1.0 if len(df) == 0 else max(1.0, float(df[metric].max()) * 1.05))
    ax.grid(True, alpha=0.3)
    _legend(ax)
    return ax
