"""The Python package against the command line: the same trace and settings give the same numbers, errors name
the file and line or the option, and the step-by-step Cache equals the one-pass simulation."""

import csv
import io
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import blockwell

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("BLOCKWELL_BIN", ROOT / "target" / "release" / "blockwell"))
CLOUDPHYSICS = ROOT.parent / "shared" / "traces" / "cloudphysics" / "cloudPhysicsIO.csv"


def shared_trace() -> Path:
    if not CLOUDPHYSICS.exists():
        pytest.skip(f"SKIPPED LOUDLY: {CLOUDPHYSICS} is missing (../shared beside the checkout)")
    return CLOUDPHYSICS


def cli_csv(*args: str):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build it first (cargo build --release -p blockwell-cli)")
    out = subprocess.run([str(BIN), "sim", "--csv", *args], check=True, capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(out)))


COUNTS = [
    "cache_blocks", "cache_bytes", "block_size", "requests", "blocks", "block_misses", "read_blocks",
    "read_block_misses", "write_blocks", "write_block_misses", "request_misses", "read_requests",
    "read_request_misses", "write_requests", "write_request_misses", "prefetch_issued", "prefetch_used",
    "prefetch_late", "prefetch_wasted", "admission_rejections", "bypassed", "evictions", "sets",
]
RATIOS = ["block_miss_ratio", "read_block_miss_ratio", "write_block_miss_ratio", "request_miss_ratio",
          "prefetch_accuracy", "prefetch_coverage"]
SETTINGS = ["preset", "prefetch", "admission", "sequential_cutoff", "reads_only", "warmup", "volumes"]


def cell(x) -> str:
    """A DataFrame value as the command's CSV writes it (absent: empty; booleans: true/false)."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return ""
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    return str(x)


@pytest.mark.parametrize(
    "py_kwargs,cli_args",
    [
        (dict(policies=["lru", "arc", "2q", "lirs"], cache=["1%", "10%", "16MiB"]),
         ["--policy", "lru,arc,2q,lirs", "--cache", "1%,10%,16MiB"]),
        (dict(policies="lru", cache="5%", prefetch="linux26", admission="n-hit:2", reads_only=True),
         ["--policy", "lru", "--cache", "5%", "--prefetch", "linux26", "--admission", "n-hit:2", "--reads-only"]),
        (dict(policies=["lru", "clock"], cache="5%", admission="tinylfu"),
         ["--policy", "lru,clock", "--cache", "5%", "--admission", "tinylfu"]),
        (dict(policies="arc", cache="5%", admission="prob:0.3:seed=2"),
         ["--policy", "arc", "--cache", "5%", "--admission", "prob:0.3:seed=2"]),
        (dict(policies=["opt", "fifo"], cache=[2000 * 4096], block_size=4096, warmup=10000),
         ["--policy", "opt,fifo", "--cache", str(2000 * 4096), "--warmup", "10000"]),
    ],
)
def test_sim_equals_the_command_line(py_kwargs, cli_args):
    trace = shared_trace()
    df = blockwell.sim(trace, **py_kwargs)
    rows = cli_csv("--trace", str(trace), *cli_args)
    assert len(df) == len(rows) > 0
    for (_, got), want in zip(df.iterrows(), rows):
        assert got["policy"] == want["policy"]
        assert got["trace"] == str(trace)
        for c in COUNTS:
            assert int(got[c]) == int(want[c]), (got["policy"], c)
        for c in RATIOS:
            if want[c] == "":  # undefined: empty in the CSV, NaN in the frame
                assert np.isnan(got[c]), (got["policy"], c)
            else:
                assert got[c] == pytest.approx(float(want[c]), abs=1e-6), (got["policy"], c)
        for c in SETTINGS:
            assert cell(got[c]) == want[c], (got["policy"], c)
    assert df.attrs["requests"] == int(rows[0]["requests"]) or py_kwargs.get("warmup")


def test_read_trace_batches_and_pandas():
    trace = shared_trace()
    batches = list(blockwell.read_trace(trace, batch_size=10000))
    assert [len(b["offset"]) for b in batches[:-1]] == [10000] * (len(batches) - 1)
    total = sum(len(b["offset"]) for b in batches)
    df = blockwell.read_trace(trace).to_pandas()
    assert len(df) == total == blockwell.sim(trace, "lru", "1%").attrs["requests"]
    assert list(df.columns) == list(blockwell.TRACE_COLUMNS)
    assert set(df["op"].unique()) <= {"read", "write"}
    assert df["offset"].dtype == np.uint64 and (df["len"] > 0).all()
    first = batches[0]
    assert first["offset"].dtype == np.uint64 and first["op"].dtype == np.uint8


def test_trace_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,volume,op,offset,len\n0,0,R,0,4096\n1,0,R,zzz,4096\n")
    cols = "time=0,volume=1,op=2,offset=3,len=4"
    with pytest.raises(blockwell.TraceError, match=r"bad\.csv:3: "):
        blockwell.read_trace(bad, "csv", csv_columns=cols).to_pandas()
    with pytest.raises(blockwell.TraceError, match=r"bad\.csv:3: "):
        blockwell.sim(bad, "lru", "10blocks", format="csv", csv_columns=cols)
    df = blockwell.sim(bad, "lru", "10blocks", format="csv", csv_columns=cols, skip_bad_lines=1)
    assert df.attrs["requests"] == 1 and df.attrs["skipped_lines"] == 1
    with pytest.raises(blockwell.TraceError, match="missing.csv"):
        blockwell.read_trace(tmp_path / "missing.csv")


def test_bad_settings_name_the_option(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("0,0,R,0,4096\n")
    kw = dict(format="csv", csv_columns="time=0,volume=1,op=2,offset=3,len=4")
    for bad, option in [
        (dict(policies="nosuch"), "policies"),
        (dict(cache="12XB"), "cache"),
        (dict(prefetch="nope"), "prefetch"),
        (dict(admission="nope"), "admission"),
        (dict(admission="prob:2"), "admission"),
        (dict(admission="tinylfu:sample=0"), "admission"),
        (dict(preset="nope"), "preset"),
        (dict(block_size=3000), "block_size"),
    ]:
        with pytest.raises(ValueError, match=f"^{option}: "):
            blockwell.sim(trace, **{**kw, **bad})
    with pytest.raises(ValueError, match="^policy: "):
        blockwell.Cache("opt", "1MiB")
    with pytest.raises(ValueError, match="^size: "):
        blockwell.Cache("lru", "5%")
    with pytest.raises(ValueError, match="^op: "):
        blockwell.Cache("lru", "1MiB").access("erase", 0, 4096)


def test_cache_steps_equal_the_one_pass_simulation():
    trace = shared_trace()
    for policy, kwargs in [("lru", {}), ("arc", {}), ("lru", dict(prefetch="linux26"))]:
        c = blockwell.Cache(policy, "1000blocks", **kwargs)
        hits = misses = 0
        for b in blockwell.read_trace(trace):
            h, m = c.access_many(b["op"], b["offset"], b["len"], b["volume"])
            hits, misses = hits + h, misses + m
        row = blockwell.sim(trace, policy, "1000blocks", **kwargs).iloc[0]
        assert misses == row["block_misses"], policy
        assert hits + misses == row["blocks"]
        st = c.stats
        assert st["read"]["blocks"] - st["read"]["block_hits"] == row["read_block_misses"]
        assert st["prefetch_issued"] == row["prefetch_issued"]
        assert len(c) == c.capacity == 1000


def test_cache_step_by_step():
    c = blockwell.Cache("lru", "2blocks")
    assert c.access("read", 0, 8192) == (0, 2)
    assert c.access("r", 0, 4096) == (1, 0)
    assert c.access(0, 8192, 4096) == (0, 1)  # evicts block 1 (LRU)
    assert c.access("read", 4096, 4096) == (0, 1)
    assert c.access("write", 0, 4096, volume=1) == (0, 1)
    assert c.stats["evictions"] == 3
    c.reset_stats()
    assert c.stats["read"]["requests"] == 0 and len(c) == 2
    assert repr(c) == "blockwell.Cache('lru', 2 blocks of 4096 B)"


class PyLRU(blockwell.PolicyHooks):
    """LRU in Python: an ordered dict, oldest first."""

    def __init__(self, capacity):
        super().__init__(capacity)
        from collections import OrderedDict

        self.order = OrderedDict()

    def access(self, key):
        self.order.move_to_end(key)

    def insert(self, key, prefetched):
        self.order[key] = None

    def evict(self):
        return self.order.popitem(last=False)[0]

    def remove(self, key):
        del self.order[key]


def test_an_lru_written_in_python_equals_the_engines_lru():
    trace = shared_trace()
    df = blockwell.sim(trace, policies=["lru", PyLRU], cache=["1%", "500blocks"])
    assert list(df["policy"]) == ["lru", "lru", "PyLRU", "PyLRU"]
    engine, python = df.iloc[:2].reset_index(drop=True), df.iloc[2:].reset_index(drop=True)
    for c in COUNTS + RATIOS + SETTINGS:
        assert engine[c].equals(python[c]), c  # (NaN, an undefined ratio, equals NaN here)
    # With a prefetcher and warm-up too (prefetched blocks enter through insert(key, True)).
    kw = dict(cache="2000blocks", prefetch="linux26", warmup=5000, reads_only=True)
    a, b = blockwell.sim(trace, "lru", **kw).iloc[0], blockwell.sim(trace, PyLRU, **kw).iloc[0]
    for c in COUNTS:
        assert a[c] == b[c], c


def test_python_policy_errors_reach_the_caller():
    class Bad(PyLRU):
        def evict(self):
            return 123456789

    c = blockwell.Cache(Bad, "2blocks")
    c.access("read", 0, 8192)
    with pytest.raises(ValueError, match="evict\\(\\) returned 123456789, which is not in the cache"):
        c.access("read", 8192, 4096)
    assert len(c) == 2, "the step finished consistently"

    class Raises(PyLRU):
        def insert(self, key, prefetched):
            raise RuntimeError("boom")

    c = blockwell.Cache(Raises, "2blocks")
    with pytest.raises(RuntimeError, match="boom"):
        c.access_many([0, 0], [0, 4096], [4096, 4096])
    class NoEvict:
        def __init__(self, capacity):
            pass

        access = insert = remove = lambda self, *a: None

    with pytest.raises(ValueError, match=r"^policy: a Python policy needs a method evict\(\)"):
        blockwell.Cache(NoEvict, "2blocks")


def test_mrc_and_trace_stats_equal_the_command_line():
    trace = shared_trace()
    df = blockwell.mrc(trace, sizes=["1%", "10%", "64MiB"])
    out = subprocess.run([str(BIN), "mrc", "--trace", str(trace), "--cache", "1%,10%,64MiB", "--csv"],
                         check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [int(r["cache_blocks"]) for r in rows] == list(df["cache_blocks"])
    for r, got in zip(rows, df["miss_ratio"]):
        assert got == pytest.approx(float(r["miss_ratio"]), abs=1e-6)
    # The exact curve at a size equals LRU's block miss ratio in sim.
    lru = blockwell.sim(trace, "lru", "1%").iloc[0]
    assert df["miss_ratio"].iloc[0] == pytest.approx(lru["block_miss_ratio"], abs=1e-9)
    assert df.attrs["exact"] and df.attrs["footprint"] == blockwell.sim(trace, "lru", "1%").attrs["footprint_blocks"]
    sampled = blockwell.mrc(trace, points=5, sample=0.1)
    assert len(sampled) == 5 and not sampled.attrs["exact"]

    st = blockwell.trace_stats(trace)
    cli = subprocess.run([str(BIN), "trace", "stats", "--trace", str(trace), "--json"],
                         check=True, capture_output=True, text=True).stdout
    import json

    want = json.loads(cli)
    want.pop("trace")
    assert st == want


def test_over_time_equals_the_command_line_and_adds_up():
    trace = shared_trace()
    df = blockwell.over_time(trace, ["lru", "arc"], ["1%", "10%"], interval=25_000, warmup=5_000)
    out = subprocess.run([str(BIN), "sim", "--trace", str(trace), "--policy", "lru,arc", "--cache", "1%,10%",
                          "--interval", "25000", "--warmup", "5000", "--csv"], check=True, capture_output=True,
                         text=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(df) == len(rows) > 4
    for (_, got), want in zip(df.iterrows(), rows):
        for col in ("policy", "cache_blocks", "interval", "end_request", "blocks", "block_misses", "request_misses"):
            assert str(got[col]) == want[col], col
        assert abs(got["block_miss_ratio"] - float(want["block_miss_ratio"])) < 1e-6
    total = blockwell.sim(trace, ["lru", "arc"], ["1%", "10%"], warmup=5_000)
    sums = df.groupby(["policy", "cache_blocks"], sort=False)["block_misses"].sum().tolist()
    assert sums == total["block_misses"].tolist()
    with pytest.raises(ValueError, match="interval: must be at least 1"):
        blockwell.over_time(trace, "lru", "1%", interval=0)


def test_plot_over_time_draws_a_line_per_cache(tmp_path):
    pytest.importorskip("matplotlib", reason="SKIPPED LOUDLY: matplotlib is not installed")
    import matplotlib

    matplotlib.use("Agg")
    df = blockwell.over_time(shared_trace(), ["lru", "arc"], ["1%"], interval=25_000)
    ax = blockwell.plot.over_time(df)
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == [f"{p} / {b} blocks" for p, b in
                                                df[["policy", "cache_blocks"]].drop_duplicates().values]
    lru = df[df["policy"] == "lru"]
    # Each interval's ratio held over the interval, the first from where counting starts, as the command line.
    start = int(lru["end_request"].iloc[0] - lru["requests"].iloc[0])
    assert list(lines[0].get_xdata()) == [start] + lru["end_request"].tolist()
    assert list(lines[0].get_ydata()) == [lru["block_miss_ratio"].iloc[0]] + lru["block_miss_ratio"].tolist()
    assert lines[0].get_drawstyle() == "steps-pre"
    ax.figure.savefig(tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 5_000
    # The legend beside the axes, covering no data.
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1


def test_plot_mrc_marks_the_tables_points_with_the_legend_outside(tmp_path):
    pytest.importorskip("matplotlib", reason="SKIPPED LOUDLY: matplotlib is not installed")
    import matplotlib

    matplotlib.use("Agg")
    ax = blockwell.plot.mrc(blockwell.mrc(shared_trace(), ["1%", "5%", "10%"]))
    (line,) = ax.get_lines()
    assert line.get_marker() == "o" and line.get_linestyle() == "-", "a line with circles, as `mrc --plot`"
    ax.figure.savefig(tmp_path / "m.png")
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1


def test_mrc_of_policies_equals_the_command_line():
    trace = shared_trace()
    df = blockwell.mrc(trace, ["2000blocks", "20000blocks"], policies=["lru", "arc"], sample=0.1)
    out = subprocess.run([str(BIN), "mrc", "--trace", str(trace), "--cache", "2000blocks,20000blocks", "--policy",
                          "lru,arc", "--sample", "0.1", "--csv"], check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(df["policy"]) == [r["policy"] for r in rows] == ["lru", "lru", "arc", "arc"]
    assert list(df["sampled_cache_blocks"]) == [200, 2000, 200, 2000]
    for (_, got), want in zip(df.iterrows(), rows):
        assert got["cache_blocks"] == int(want["cache_blocks"])
        assert abs(got["miss_ratio"] - float(want["miss_ratio"])) < 1e-6
    # LRU's miniature curve is the SHARDS curve at the same rate (up to the interpolation of SHARDS's histogram,
    # whose buckets widen past 2^20 scaled distances).
    shards = blockwell.mrc(trace, ["2000blocks", "20000blocks"], sample=0.1)
    assert np.allclose(df["miss_ratio"][:2].to_numpy(), shards["miss_ratio"].to_numpy(), atol=1e-4)
    with pytest.raises(ValueError, match=r"sample: sampling rate 2 is not in \(0, 1\]"):
        blockwell.mrc(trace, policies="lru", sample=2.0)
