"""Numbers that mean what they say, from Python: undefined ratios are NaN (never 0), every row carries the
settings that produced it in the command's own columns, a sweep's kept results follow the trace file, and a
trace's volumes are the trace's names."""

import csv
import io
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import blockwell

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("BLOCKWELL_BIN", ROOT / "target" / "release" / "blockwell"))

# vscsi: reads, a write, a re-read.
SMALL = "version,time,op,size,lbn\n1,10,28,4096,0\n1,20,28,8192,8\n1,30,2a,4096,0\n1,40,28,4096,16\n1,50,28,12288,0\n"


def cli(*args: str) -> str:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build it first (cargo build --release -p blockwell-cli)")
    return subprocess.run([str(BIN), *args], check=True, capture_output=True, text=True).stdout


def small(tmp_path, name="small.csv", body=SMALL) -> str:
    p = tmp_path / name
    p.write_text(body)
    return str(p)


def test_undefined_ratios_are_nan_never_0(tmp_path):
    t = small(tmp_path)
    df = blockwell.sim(t, "lru", "2blocks", reads_only=True)
    r = df.iloc[0]
    assert np.isnan(r["write_block_miss_ratio"]) and np.isnan(r["prefetch_accuracy"]), r
    assert r["read_block_miss_ratio"] > 0
    assert df["write_block_miss_ratio"].dtype == np.float64
    # A warm-up as long as the trace counts nothing: every ratio undefined.
    w = blockwell.sim(t, "lru", "2blocks", warmup=5).iloc[0]
    assert all(np.isnan(w[c]) for c in ["block_miss_ratio", "read_block_miss_ratio", "request_miss_ratio"]), w
    # A Python policy's row says the same.

    class Fifo(blockwell.PolicyHooks):
        def __init__(self, capacity):
            super().__init__(capacity)
            self.q = []

        def insert(self, key, prefetched):
            self.q.append(key)

        def evict(self):
            return self.q.pop(0)

        def remove(self, key):
            self.q.remove(key)

    h = blockwell.sim(t, [Fifo], "2blocks", reads_only=True).iloc[0]
    assert np.isnan(h["write_block_miss_ratio"]) and np.isnan(h["prefetch_accuracy"]), h
    iv = blockwell.over_time(t, "lru", "2blocks", interval=2, reads_only=True)
    assert iv["block_miss_ratio"].dtype == np.float64


def test_rows_carry_their_settings_in_the_commands_columns(tmp_path):
    t = small(tmp_path)
    header = cli("sim", "--trace", t, "--cache", "2blocks", "--csv").splitlines()[0].split(",")
    assert blockwell.SIM_COLUMNS == ["trace"] + header
    iv_header = cli("sim", "--trace", t, "--cache", "2blocks", "--interval", "2", "--csv").splitlines()[0]
    assert blockwell.INTERVAL_COLUMNS == ["trace"] + iv_header.split(",")
    frames = [blockwell.sim(t, "lru", "2blocks", admission=a) for a in ["always", "n-hit:2", "prob:0.5"]]
    assert [f["admission"].iloc[0] for f in frames] == ["always", "n-hit:2", "prob:0.5"]
    r = blockwell.sim(t, "lru", "2blocks", prefetch="obl", sequential_cutoff="64KiB", warmup=1).iloc[0]
    assert (r["prefetch"], r["sequential_cutoff"], r["warmup"], r["reads_only"]) == ("obl", 65536, "1", False)
    # The same row as the command's.
    want = list(csv.DictReader(io.StringIO(cli("sim", "--trace", t, "--cache", "2blocks", "--prefetch", "obl",
                                                "--sequential-cutoff", "64KiB", "--warmup", "1", "--csv"))))[0]
    for c in ["prefetch", "sequential_cutoff", "warmup", "admission", "preset", "block_size"]:
        assert str(r[c]) == want[c], c


def test_a_sweep_reruns_a_changed_or_fixed_trace_and_never_keeps_a_failure(tmp_path):
    good = small(tmp_path, "good.csv")
    bad = tmp_path / "t.lis"
    bad.write_text("0 8 0 0\nnot a line\n")
    out = tmp_path / "kept"
    first = blockwell.sweep([good, str(bad)], "lru", "2blocks", processes=1, out_dir=out)
    assert first["error"].isna().tolist() == [True, False]
    # A failure leaves the counts integers (missing, not NaN floats).
    assert str(first["cache_blocks"].dtype) == "Int64" and first["cache_blocks"].iloc[0] == 2
    assert pd.isna(first["cache_blocks"].iloc[1])
    assert len(list(out.glob("*.parquet"))) == 1, "the failure is not kept"
    # The bad trace fixed: its results come back.
    bad.write_text("0 8 0 0\n8 8 0 1\n0 8 0 2\n")
    second = blockwell.sweep([good, str(bad)], "lru", "2blocks", processes=1, out_dir=out)
    assert second["error"].isna().all(), second
    assert second["blocks"].iloc[1] == blockwell.sim(str(bad), "lru", "2blocks")["blocks"].iloc[0]
    # The good trace changed (same name, other requests): new results, not the kept ones.
    time.sleep(0.01)
    Path(good).write_text(SMALL + "1,60,28,4096,64\n")
    third = blockwell.sweep([good], "lru", "2blocks", processes=1, out_dir=out)
    assert third["requests"].iloc[0] == 6, third
    # Unchanged: read back from out_dir.
    kept = {f: f.stat().st_mtime_ns for f in out.glob("*.parquet")}
    again = blockwell.sweep([good], "lru", "2blocks", processes=1, out_dir=out)
    assert again["requests"].iloc[0] == 6
    assert {f: f.stat().st_mtime_ns for f in out.glob("*.parquet")} == kept


def test_to_pandas_gives_volumes_as_the_traces_names(tmp_path):
    # MSR names its volumes by host and disk.
    msr = tmp_path / "m.csv"
    msr.write_text("128166372003061629,hm,1,Read,4096,4096,100\n128166372003071629,src,2,Write,0,4096,100\n"
                   "128166372003081629,hm,1,Read,8192,4096,100\n")
    df = blockwell.read_trace(msr, "msr").to_pandas()
    assert isinstance(df["volume"].dtype, pd.CategoricalDtype), df.dtypes
    assert df["volume"].tolist() == ["hm_1", "src_2", "hm_1"]
    # A format without volumes: its one volume, "0".
    lis = tmp_path / "t.lis"
    lis.write_text("1 1 0 0\n2 1 0 1\n")
    df = blockwell.read_trace(lis).to_pandas()
    assert isinstance(df["volume"].dtype, pd.CategoricalDtype) and df["volume"].tolist() == ["0", "0"]
