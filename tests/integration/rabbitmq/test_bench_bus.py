"""bench/bus.py still runs and prints its figures (tiny sizes: this times nothing). Here, not in
tests/integration/test_bench_smoke.py, because it needs the broker: it holds the shared broker
lock, so the outage test never stops the broker under it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.postgres import PG_URL

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_bench_bus_runs(amqp_url: str) -> None:
    env = dict(os.environ, RUNLANE_TEST_RABBITMQ_URL=amqp_url, RUNLANE_TEST_POSTGRES_URL=PG_URL)
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bus.py"), "--quick"],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"one_by_one=\d+/s pipelined=\d+/s drain=\d+\.\d+ s", proc.stdout), proc.stdout
