"""The examples in examples/ run as they are."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT.parent / "shared" / "traces" / "cloudphysics" / "cloudPhysicsIO.csv"


def test_python_quickstart_runs(tmp_path):
    pytest.importorskip("matplotlib", reason="SKIPPED LOUDLY: matplotlib is not installed")
    if not TRACE.exists():
        pytest.skip(f"SKIPPED LOUDLY: {TRACE} is missing")
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "python_quickstart.py"), str(TRACE), str(tmp_path)],
                       capture_output=True, text=True, env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "block_miss_ratio" in p.stdout and "evictions" in p.stdout
    assert (tmp_path / "mrc.png").stat().st_size > 10_000
    assert len(list((tmp_path / "sweep").glob("*.parquet"))) == 1
