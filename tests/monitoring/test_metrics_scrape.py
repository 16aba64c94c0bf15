"""/metrics of a real `runlane serve` (HTTP server and metrics listener) while its launcher runs
real inline runs, on SQLite and PostgreSQL: the series of every job exist at zero from the
start, the counters and histograms move as runs start and end, the gauges read the run log, a
token is needed on the HTTP server and not on the metrics listener; `runlane web` (no launcher)
serves only what the database says; RUNLANE_METRICS_ADDR=off serves nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from runlane.core.alert_rules import RULES
from runlane.service.metrics import PRIMED_STATUSES
from tests.acceptance.cli_process import cli_env, runlane
from tests.acceptance.test_cli_serve import answers, free_port, started, stop
from tests.monitoring.conftest import (
    CATALOG,
    JOBS,
    Samples,
    Served,
    make_token,
    parse_samples,
    serving,
    value,
    wait_until_up,
)
from tests.support.waiting import eventually_sync


def test_every_job_has_its_series_at_zero_from_the_start(served: Served) -> None:
    samples = served.scrape()
    for job in JOBS:
        executor = "inline"  # `boxed` is a pod job: no cluster here, so it runs inline
        for trigger in ("manual", "cli", "mcp"):
            labels = {"job": job, "trigger": trigger, "executor": executor}
            assert value(samples, "runlane_runs_started_total", **labels) is not None, labels
            for status in PRIMED_STATUSES:
                finished = value(samples, "runlane_runs_finished_total", **labels, status=status)
                assert finished is not None, (labels, status)
        assert value(samples, "runlane_lease_losses_total", job=job, executor=executor) == 0
    # Only what can start a job gets a series: hello has a schedule and an event, flaky retries.
    hello = {"job": "hello", "executor": "inline"}
    assert value(samples, "runlane_runs_started_total", **hello, trigger="schedule") == 0
    assert value(samples, "runlane_runs_started_total", **hello, trigger="event") == 0
    assert value(samples, "runlane_runs_started_total", **hello, trigger="chain") == 0
    assert value(samples, "runlane_runs_started_total", **hello, trigger="retry") is None
    flaky = {"job": "flaky", "executor": "inline"}
    assert value(samples, "runlane_runs_started_total", **flaky, trigger="retry") == 0
    # Schedule lag shows from the first scheduled claim, not before (no zero series per job).
    assert value(samples, "runlane_schedule_lag_seconds_count", job="hello") is None
    assert value(samples, "runlane_run_pickup_latency_seconds_count", executor="inline") is not None
    assert value(samples, "runlane_claim_duration_seconds_count") is not None
    assert value(samples, "runlane_database_up") == 1
    assert value(samples, "runlane_runs_queued", executor="inline") is not None
    assert value(samples, "runlane_outbox_oldest_pending_seconds") == 0
    build = [k for k in samples if k[0] == "runlane_build_info"]
    assert len(build) == 1
    assert samples[build[0]] == 1


def _started(samples: Samples, job: str, trigger: str = "cli") -> float:
    found = value(
        samples, "runlane_runs_started_total", job=job, trigger=trigger, executor="inline"
    )
    return found or 0.0


def _finished(samples: Samples, job: str, status: str, trigger: str = "cli") -> float:
    found = value(
        samples,
        "runlane_runs_finished_total",
        job=job,
        trigger=trigger,
        executor="inline",
        status=status,
    )
    return found or 0.0


def test_counters_and_histograms_follow_real_runs(served: Served) -> None:
    before = served.scrape()
    assert served.cli("run", "hello", "--wait").returncode == 0
    assert served.cli("run", "fail", "--wait").returncode == 1
    flaky = served.cli("run", "flaky", "--wait", "--json")
    assert json.loads(flaky.stdout)["status"] == "success", flaky.stdout

    def moved() -> Samples | None:
        now = served.scrape()
        return now if _finished(now, "flaky", "success", trigger="retry") >= 1 else None

    after = eventually_sync(moved, "the retry's outcome is counted", within=30)
    assert _started(after, "hello") == _started(before, "hello") + 1
    assert _finished(after, "hello", "success") == _finished(before, "hello", "success") + 1
    assert _finished(after, "fail", "failure") == _finished(before, "fail", "failure") + 1
    assert _finished(after, "fail", "success") == _finished(before, "fail", "success")
    assert _finished(after, "flaky", "failure") == _finished(before, "flaky", "failure") + 1
    assert _started(after, "flaky", trigger="retry") == _started(before, "flaky", "retry") + 1

    def count(samples: Samples, job: str, status: str) -> float:
        labels = {"job": job, "executor": "inline", "status": status}
        return value(samples, "runlane_run_duration_seconds_count", **labels) or 0.0

    assert count(after, "hello", "success") == count(before, "hello", "success") + 1
    assert count(after, "fail", "failure") == count(before, "fail", "failure") + 1
    total = value(after, "runlane_run_duration_seconds_sum", job="hello", executor="inline",
                  status="success")  # fmt: skip
    assert total is not None
    assert 0 < total < 60
    inf = value(after, "runlane_run_duration_seconds_bucket", job="hello", executor="inline",
                status="success", le="+Inf")  # fmt: skip
    assert inf == count(after, "hello", "success")
    pickups = value(after, "runlane_run_pickup_latency_seconds_count", executor="inline") or 0
    assert (
        pickups
        >= (value(before, "runlane_run_pickup_latency_seconds_count", executor="inline") or 0) + 4
    )  # hello, fail, flaky and its retry
    # Each of those runs came from a claim, and each claim is timed (idle polls add more).
    claims = value(after, "runlane_claim_duration_seconds_count") or 0
    assert claims >= (value(before, "runlane_claim_duration_seconds_count") or 0) + 4
    claimed_for = value(after, "runlane_claim_duration_seconds_sum")
    assert claimed_for is not None
    assert 0 < claimed_for < claims * 5  # each within the database bound
    slowest = value(after, "runlane_claim_duration_seconds_bucket", le="5")
    assert slowest == claims
    assert value(after, "runlane_runs_running", executor="inline") == 0
    ages = [v for (name, _), v in after.items() if name == "runlane_launcher_heartbeat_age_seconds"]
    assert len(ages) == 1
    assert 0 <= ages[0] < 30


def test_open_incidents_by_rule_come_from_the_alert_loop(served: Served) -> None:
    samples = served.scrape()
    for rule in RULES:  # every rule has its series from the start
        assert value(samples, "runlane_open_incidents", rule=rule) is not None, rule
    # `fail` has `alert: critical`: its failure opens an incident, which the gauge counts.
    assert served.cli("run", "fail", "--wait").returncode == 1
    eventually_sync(
        lambda: (value(served.scrape(), "runlane_open_incidents", rule="run_failed") or 0) >= 1,
        "the failure's incident is counted",
        within=30,
    )


def test_the_http_server_needs_a_token_and_the_listener_does_not(served: Served) -> None:
    assert served.request("GET", "/metrics", None).status_code == 401
    answer = served.request("GET", "/metrics", "viewer")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    listener = httpx.get(f"{served.metrics}/metrics", timeout=10)
    assert listener.status_code == 200
    theirs, ours = parse_samples(listener.text), parse_samples(answer.text)
    # One launcher's counters, whichever address serves them.
    assert _started(theirs, "hello") == _started(ours, "hello")
    assert httpx.get(f"{served.metrics}/api/v1/jobs", timeout=10).status_code == 404


def test_metrics_off_serves_none_and_a_bad_address_is_one_line(tmp_path: Path) -> None:
    with serving(tmp_path, None, RUNLANE_METRICS_ADDR="off") as server:
        wait_until_up(server, f"{server.http}/healthz")
        assert server.request("GET", "/metrics", "viewer").status_code == 404
    bad = server.cli("config", RUNLANE_METRICS_ADDR="http://x:1")
    assert bad.returncode != 0
    assert "RUNLANE_METRICS_ADDR" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_listener_serves_with_http_off(tmp_path: Path) -> None:
    with serving(tmp_path, None, "--no-http") as server:
        wait_until_up(server, f"{server.metrics}/metrics")
        assert server.cli("run", "hello", "--wait").returncode == 0
        samples = parse_samples(httpx.get(f"{server.metrics}/metrics", timeout=10).text)
        assert _finished(samples, "hello", "success") == 1
        assert answers(f"{server.http}/healthz") is None  # HTTP is off


def test_runlane_web_serves_only_what_the_database_says(tmp_path: Path) -> None:
    env = cli_env(tmp_path, CATALOG, RUNLANE_LOG_LEVEL="info")
    token = make_token(env, "viewer")
    # No launcher runs here: the run stays queued, and the queue depth says so.
    assert runlane("run", "hello", env=env).returncode == 0
    port = free_port()
    with started(tmp_path, "web", "--http-addr", f"127.0.0.1:{port}", env=env) as proc:
        url = f"http://127.0.0.1:{port}"
        eventually_sync(lambda: answers(f"{url}/healthz"), "web answers", within=30)
        headers = {"Authorization": f"Bearer {token}"}
        samples = parse_samples(httpx.get(f"{url}/metrics", headers=headers, timeout=10).text)
        names = {name for name, _ in samples}
        assert "runlane_build_info" in names
        assert value(samples, "runlane_database_up") == 1
        assert value(samples, "runlane_runs_queued", executor="inline") == 1
        assert value(samples, "runlane_runs_running", executor="inline") == 0
        assert "runlane_launcher_heartbeat_age_seconds" not in names  # no launcher has beaten
        assert not any(n.startswith("runlane_runs_started") for n in names)  # none here
        assert stop(proc) == 0
