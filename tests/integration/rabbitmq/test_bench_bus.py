"""bench/bus.py and bench/throughput.py --bus both still run and print their figures (tiny
sizes: this times nothing). Here, not in tests/integration/test_bench_smoke.py, because they
need the broker: they hold the shared broker lock, so the outage test never stops the broker
under them."""

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


def run_bench(amqp_url: str, script: str, *args: str) -> str:
    """The script's stdout; it must exit 0 (its stderr shown otherwise)."""
    env = dict(os.environ, RUNLANE_TEST_RABBITMQ_URL=amqp_url, RUNLANE_TEST_POSTGRES_URL=PG_URL)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_bench_bus_runs(amqp_url: str) -> None:
    out = run_bench(amqp_url, "bus.py", "--quick")
    assert re.search(r"one_by_one=\d+/s pipelined=\d+/s drain=\d+\.\d+ s", out), out


def test_bench_throughput_both_buses_runs(amqp_url: str) -> None:
    # bench/throughput.py --bus both: a round on each bus, RabbitMQ's on a vhost of its own.
    out = run_bench(amqp_url, "throughput.py", "--quick", "--bus", "both")
    for bus in ("db", "rabbitmq"):  # RabbitMQ's line also has bus_drain_s
        found = re.search(
            rf"^\[postgres/{bus} median of 1\] runs_per_s=\d+\.\d+ .*"
            r"launcher_cpu_ms_per_run=\d+\.\d+ .*pickup_p50_ms=\d+\.\d+ +pickup_p99_ms=\d+\.\d+",
            out,
            re.MULTILINE,
        )
        assert found, out[-3000:]
    # The broker runs on this machine (the suite's own): its CPU is read beside the launcher's,
    # on the RabbitMQ round only.
    assert re.search(
        r"^\[postgres/rabbitmq median of 1\] .*broker_cpu_ms_per_run=\d+\.\d+", out, re.M
    )
    assert not re.search(r"^\[postgres/db median of 1\] .*broker_cpu_ms_per_run", out, re.M)
