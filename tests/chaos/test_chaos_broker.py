"""The chaos suite on the RabbitMQ bus: three launchers on the real PostgreSQL and a RabbitMQ
vhost of the test's own, killed (-9) and stalled past their lease while the broker app is
stopped and started and the launchers' connections are closed. Nothing may be lost or run
twice, every outbox row is published at least once, every fact reaches the broker and every
duplicate command is absorbed (job_runs ends empty, nothing dead-lettered). Bounded to about a
minute; it holds the broker exclusively (the other RabbitMQ tests wait while it runs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runlane.testing.chaos import ChaosConfig, run_chaos
from tests.support.postgres import PG_URL, require_postgres
from tests.support.rabbitmq import broker_lock, can_control_broker, session_vhost

IN_CI = os.environ.get("CI") == "true"
RUNS = 150

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]


def test_broker_faults_lose_nothing_run_nothing_twice_and_drain_the_outbox(
    tmp_path: Path,
) -> None:
    require_postgres()
    with session_vhost() as amqp_url:  # skips locally, fails in CI, when RabbitMQ is absent
        if not can_control_broker():
            message = "broker faults need rabbitmqctl as root on the broker's host"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
        with broker_lock(exclusive=True):
            report = run_chaos(
                ChaosConfig(
                    admin_url=PG_URL,
                    workdir=tmp_path,
                    runs=RUNS,
                    duration=24.0,
                    drain_timeout=60.0,
                    chaos_every=2.5,
                    restart_postgres=False,
                    schedules=False,
                    amqp_url=amqp_url,
                    broker_faults=True,
                )
            )
    print(report.summary())
    assert report.violations == [], "\n".join(report.violations[:50])
    assert report.first_attempts == RUNS
    assert report.kills >= 1
    assert report.pauses >= 1
    assert report.broker_stops >= 1
    assert report.connections_closed >= 1
    # Every attempt's command and facts went through the outbox: a command each, and a fact
    # per state change (running and final at least; queued too once a launcher set facts on).
    assert report.outbox_rows >= 3 * report.runs
    assert report.facts_seen >= 2 * report.runs
    assert report.ledger_lines >= report.statuses["success"]
