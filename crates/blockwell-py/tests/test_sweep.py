"""Sweeps: local processes and a Dask LocalCluster give the same DataFrame as one sim per trace; a bad trace is a
row with its error; a sweep with out_dir resumes from the results it kept."""

import os
from pathlib import Path

import pandas as pd
import pytest

import blockwell

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces"


def traces(tmp_path):
    got = [SHARED / "cloudphysics" / "cloudPhysicsIO.csv", SHARED / "arc" / "P3.lis.zst"]
    for t in got:
        if not t.exists():
            pytest.skip(f"SKIPPED LOUDLY: {t} is missing (../shared beside the checkout)")
    bad = tmp_path / "bad.lis"
    bad.write_text("0 8 0 0\nnot a line\n")
    return [str(got[0]), str(bad), str(got[1])]


POLICIES = ["lru", "arc", "s3fifo"]
CACHE = ["1%", "10%"]


def expected(paths, per_task):
    rows = []
    for t in paths:
        for i in range(0, len(POLICIES), per_task):
            chunk = POLICIES[i : i + per_task]
            try:
                df = blockwell.sim(t, chunk, CACHE)
                df["error"] = None
            except blockwell.TraceError as e:
                df = pd.DataFrame([{"trace": t, "policy": ",".join(chunk), "error": f"TraceError: {e}"}])
            rows.append(df)
    from blockwell.sweep import _typed

    return _typed(pd.concat(rows, ignore_index=True))[blockwell.SIM_COLUMNS + ["error"]]


def same(a, b):
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)


def test_local_sweep_equals_one_sim_per_trace_and_keeps_going_past_a_bad_trace(tmp_path):
    paths = traces(tmp_path)
    got = blockwell.sweep(paths, POLICIES, CACHE, policies_per_task=2, processes=2)
    same(got, expected(paths, 2))
    bad = got[got["trace"] == paths[1]]
    assert list(bad["policy"]) == ["lru,arc", "s3fifo"], bad
    assert all("bad.lis:2:" in e for e in bad["error"]), bad
    assert got["error"].isna().sum() == len(got) - 2


def test_a_sweep_resumes_from_its_out_dir(tmp_path):
    paths = traces(tmp_path)
    out = tmp_path / "results"
    first = blockwell.sweep(paths, POLICIES, CACHE, processes=2, out_dir=out)
    files = sorted(out.glob("*.parquet"))
    assert len(files) == 2, "the two good traces' results; a failure is never kept"
    stamps = {f: f.stat().st_mtime_ns for f in files}
    again = blockwell.sweep(paths, POLICIES, CACHE, processes=2, out_dir=out)
    same(again, first)
    assert {f: f.stat().st_mtime_ns for f in files} == stamps, "kept results are read, not recomputed"
    # A different configuration is a different task.
    blockwell.sweep(paths[:1], POLICIES, ["5%"], processes=1, out_dir=out)
    assert len(list(out.glob("*.parquet"))) == 3


def test_a_dask_local_cluster_gives_the_same_sweep(tmp_path):
    distributed = pytest.importorskip("distributed", reason="SKIPPED LOUDLY: dask.distributed is not installed")
    paths = traces(tmp_path)
    want = blockwell.sweep(paths, POLICIES, CACHE, policies_per_task=1, processes=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            got = blockwell.sweep(paths, POLICIES, CACHE, policies_per_task=1, client=client)
    same(got, want)
    same(got, expected(paths, 1))
    assert len(got) == 2 * len(POLICIES) * len(CACHE) + len(POLICIES)
