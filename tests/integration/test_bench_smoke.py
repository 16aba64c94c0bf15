"""Every benchmark script still runs and prints its figures (tiny sizes: this times nothing).

The figures in docs/performance.md come from these scripts; a script that rots would leave
them unreproducible. bench/soak.py is left out: tests/chaos drives the same harness.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# script, tiny arguments, a pattern its last lines must contain (a figure with its unit)
CASES = [
    ("calibrate.py", "--spawns 50 --repeat 1", r"asyncio_16_in_flight=\d+/s threads_16=\d+/s"),
    ("fencing.py", "--runs 50 --repeat 1", r"cost of fencing=[+-]?\d+\.\d+ ms"),
    ("inline_executor.py", "--runs 50 --repeat 1", r"cpu_ms_per_run=\d+\.\d+"),
    ("issue2.py", "--quick", r"machine: \d+ -> \d+ asyncio spawns/s(.|\n)*SQLite CPU ms/run"),
    ("latency.py", "--quick", r"pickup p50=\d+\.\d+ ms p99=\d+\.\d+ ms"),
    ("multi_launcher.py", "--runs 100 --launchers 1 2 --repeat 1", r"\] \d+ runs/s"),
    ("pod_scale.py", "--runs 20 --repeats 1 --per-kind 2", r"\d+\.\d+ s after the deadline"),
    ("recovery.py", "--samples 1 --ttl 2s --claim-interval 0.5s", r"p50=\d+\.\d+s"),
    ("schedule_latency.py", "--jobs 10 --short --db sqlite", r"p99 start lag \d+ ms"),
    ("schedule_tick.py", "--jobs 100 --short", r"\d+\.\d+ ms CPU"),
    ("spawn.py", "--spawns 50 --repeats 1", r"RSS \d+\.\d+ MiB"),
    ("store_micro.py", "--runs 50 --workers 2", r"[\d,]+ runs/s"),
    ("throughput.py", "--quick --db sqlite", r"runs_per_s=\d+\.\d+"),
    ("throughput.py", "--quick --db postgres", r"cpu_ms_per_run=\d+\.\d+"),
]


@pytest.mark.parametrize(
    ("script", "args", "pattern"), CASES, ids=[f"{c[0]} {c[1]}" for c in CASES]
)
def test_bench_script_runs(script: str, args: str, pattern: str, pg_database: str) -> None:
    # pg_database: most scripts need the PostgreSQL server (a failure in CI, never a skip)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args.split()],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(pattern, proc.stdout), proc.stdout[-3000:]
