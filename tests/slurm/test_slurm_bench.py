"""bench/slurm.py still runs and prints its figures (tiny sizes on the test cluster's machine:
this times nothing; docs/slurm.md has the measured figures)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.timeout(180)


def test_the_slurm_bench_prints_its_figures(slurm: SlurmCluster) -> None:
    # `slurm`: a missing Slurm skips here (fails in CI) before the script would fail on it.
    proc = subprocess.run(
        [sys.executable, str(BENCH / "slurm.py"), "--runs", "10", "--pending", "20",
         "--window", "2", "--poll-interval", "0.5", "--repeat", "1"],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"submissions_per_s=\d+\.\d+ cpu_ms_per_run=\d+\.\d+", proc.stdout)
    found = re.search(r"pending_runs=20 .* scontrol_calls_per_min=(\d+\.\d+)", proc.stdout)
    assert found, proc.stdout
    assert float(found.group(1)) <= 60 / 0.5 + 10  # one call per interval, not one per run
