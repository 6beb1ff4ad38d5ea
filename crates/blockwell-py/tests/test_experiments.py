"""blockwell.experiments against ``blockwell experiment ... --csv``: the same options give the same tables, a bad
option raises ValueError naming the keyword, and results do not depend on the thread count."""

import io
import subprocess

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from blockwell import TraceError, experiments
from test_blockwell import BIN, shared_trace


def cli(*args: str, out_dir=None) -> str:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build it first (cargo build --release -p blockwell-cli)")
    return subprocess.run([str(BIN), "experiment", *args], check=True, capture_output=True, text=True).stdout


def cli_frame(*args: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(cli(*args, "--csv")))


def test_redcap_equals_the_command_line():
    kwargs = dict(quick=True, benchmarks=["ior", "strided-4k"], procs=[1, 4], layouts=["contiguous", "scattered"],
                  runs=2, scale=0.0625)
    df = experiments.redcap(**kwargs)
    want = cli_frame("redcap", "--quick", "--benchmarks", "ior,strided-4k", "--procs", "1,4", "--layouts",
                     "contiguous,scattered", "--runs", "2", "--scale", "0.0625")
    assert len(df) == 2 * 2 * 2
    assert_frame_equal(df, want)
    assert set(df["benchmark"]) == {"ior", "strided-4k"}
    # Not a constant: REDCAP changes the time of some cell.
    assert (df["time_with_ms"] != df["time_without_ms"]).any()


def test_prefetch_policies_on_a_workload_and_a_trace_equal_the_command_line():
    df = experiments.prefetch_policies(quick=True, workload="loop(files=100)", policies=["lru", "arc", "lirs"])
    want = cli_frame("prefetch-policies", "--quick", "--workload", "loop(files=100)", "--policy", "lru,arc,lirs")
    assert_frame_equal(df, want)
    assert len(df) == 3 * 2 * 3
    # Read-ahead issues fewer, larger disk requests than none on a looping sequential workload.
    by = df.groupby("prefetch")["disk_requests"].sum()
    assert by["linux24"] < by["none"]

    trace = shared_trace()
    df = experiments.prefetch_policies(trace, policies=["lru", "2q"], cache=["1%", "10%"], prefetch=["none"],
                                       threads=1)
    want = cli_frame("prefetch-policies", "--trace", str(trace), "--policy", "lru,2q", "--cache", "1%,10%",
                     "--prefetch", "none", "--threads", "1")
    assert_frame_equal(df, want)
    assert (df["hit_ratio"] > 0).all()


def test_dedup_tables_equal_the_command_line(tmp_path):
    kwargs = dict(requests=20000, blocks=5000, cache=["256KiB", 2 << 20], policy_size="1MiB", volumes=[2, 3],
                  fractions=[1 / 64, 1 / 8], policies=["lru", "s3fifo"])
    got = experiments.dedup(**kwargs)
    cli("dedup", "--requests", "20000", "--blocks", "5000", "--cache", "256KiB,2MiB", "--policy-size", "1MiB",
        "--volumes", "2,3", "--fractions", "1/64,1/8", "--policies", "lru,s3fifo", "--csv", str(tmp_path))
    assert sorted(got) == ["categories", "fractions", "policies", "sizes", "volumes"]
    for name, df in got.items():
        assert_frame_equal(df, pd.read_csv(tmp_path / f"{name}.csv"), obj=name)
    assert list(got["policies"]["policy"]) == ["lru", "s3fifo"]
    assert (got["sizes"]["silent_writes"] > 0).all()
    assert (got["volumes"]["content_hits"] > 0).all()


def test_es_equivalence_and_levels():
    kwargs = dict(workload=["bonnie"], scale=0.01, cache=["25%", "50%"], slowdowns=[1, 3], threads=1)
    df = experiments.es_equivalence(**kwargs)
    want = cli_frame("es-equivalence", "--workload", "bonnie", "--scale", "0.01", "--cache", "25%,50%",
                     "--slowdowns", "1,3", "--threads", "1")
    assert_frame_equal(df, want)
    assert (df[df["slowdown"] == 1]["ratio"] == 1.0).all()
    lv = experiments.es_levels(**kwargs)
    assert list(lv["slowdown"]) == [1.0, 3.0, 1.0, 3.0]
    # The same tier size at three times the slowdown: the same misses, three times the tier's time.
    assert (lv["es.read_misses"].iloc[0], 3 * lv["es.time_ns"].iloc[0]) == (
        lv["es.read_misses"].iloc[1], lv["es.time_ns"].iloc[1])


def test_results_do_not_depend_on_threads():
    kw = dict(quick=True, workload="random(files=50)", policies=["lru", "mq"])
    assert_frame_equal(experiments.prefetch_policies(threads=1, **kw), experiments.prefetch_policies(threads=2, **kw))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: experiments.redcap(page_cache="lots"), "page_cache: 'lots'"),
        (lambda: experiments.redcap(procs=[0]), "procs: '0' is not a process count"),
        (lambda: experiments.redcap(benchmarks="nosuch"), "benchmarks: "),
        (lambda: experiments.redcap(threads=0), "threads: must be at least 1"),
        (lambda: experiments.prefetch_policies(cache="0blocks"), "cache: 0 blocks"),
        (lambda: experiments.prefetch_policies(block_size=1000), "block_size: 1000 is not a power of two"),
        (lambda: experiments.prefetch_policies(preset="nosuch"), "preset: unknown preset 'nosuch'"),
        (lambda: experiments.dedup(volumes=[1]), "volumes: counts between 2 and 16"),
        (lambda: experiments.dedup(hash_fraction=2.0), "hash_fraction: 2 is not a fraction between 0 and 1"),
        (lambda: experiments.es_equivalence(slowdowns=[0.5]), "slowdowns: give factors >= 1"),
        (lambda: experiments.es_equivalence(mode="sideways"), "mode: unknown tier mode 'sideways'"),
    ],
)
def test_bad_options_raise_naming_the_keyword(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(message), str(e.value)


def test_a_bad_trace_raises_trace_error_naming_the_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,0,R,0,4096\nnot,a,line\n")
    with pytest.raises(TraceError, match=r"bad\.csv:2"):
        experiments.prefetch_policies(bad, format="csv", cache=["10blocks"])
