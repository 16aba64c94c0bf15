"""deploy/monitoring: every SQL alert rule run on the real PostgreSQL against a seeded run log
(what fires and what does not), the DLQ rule inert without RabbitMQ, and the dashboard naming
only metrics the exporter serves (the JSON parsed, compared with a real scrape)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from runlane.catalog.loader import load_catalog
from runlane.ports import Store
from runlane.service.metrics import Exporter, LauncherMetrics
from runlane.service.wiring import store_from_url
from tests.monitoring.conftest import CATALOG
from tests.support.postgres import scratch_database

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
ALERTING = ("broken", "recovered", "timed", "paused_job", "missed", "running_now", "snoozed_over",
            "never_ran")  # fmt: skip


def _rules() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load((MONITORING / "grafana-alert-rules.yaml").read_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    return {rule["labels"]["runlane_rule"]: rule for rule in rules}


def _sql(rule: dict[str, Any]) -> str:
    (query,) = [d for d in rule["data"] if d["datasourceUid"] == "${RUNLANE_PG_DATASOURCE_UID}"]
    # What Grafana does with its environment when it reads the provisioning file.
    sql: str = query["model"]["rawSql"]
    return sql.replace("${RUNLANE_ALERT_JOBS}", ",".join(ALERTING))


@pytest.fixture(scope="module")
def run_log() -> Iterator[str]:
    """A PostgreSQL database at the current schema, its tables empty."""
    with scratch_database("runlane_rules") as url:
        store = store_from_url(url)

        async def upgrade() -> None:
            await store.open()
            await store.upgrade()
            await store.close()

        asyncio.run(upgrade())
        yield url


def _fire(url: str, rule: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return sorted(conn.execute(_sql(_rules()[rule]).encode()).fetchall())


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"TRUNCATE run_log, chain_runs, job_overrides, launcher_heartbeat")


def _run(conn: psycopg.Connection[Any], job: str, status: str, minutes_ago: float,
         end_reason: str | None = None) -> None:  # fmt: skip
    final = status not in ("queued", "running")
    conn.execute(
        b"INSERT INTO run_log (id, job, status, trigger, dedupe_key, executor, overlap, queued_at,"
        b" started_at, finished_at, end_reason) VALUES (%(id)s, %(job)s, %(status)s, 'schedule',"
        b" %(key)s, 'inline', 'allow', now() - %(ago)s * interval '1 minute',"
        b" now() - %(ago)s * interval '1 minute',"
        b" CASE WHEN %(final)s THEN now() - %(ago)s * interval '1 minute' END, %(reason)s)",
        {
            "id": uuid.uuid4(),
            "job": job,
            "status": status,
            "key": str(uuid.uuid4()),
            "ago": minutes_ago,
            "final": final,
            "reason": end_reason,
        },
    )


@pytest.mark.postgres
def test_no_rule_fires_on_an_empty_run_log(run_log: str) -> None:
    _reset(run_log)
    for rule in ("stale_heartbeat", "job_failed", "chain_overrun"):
        assert _fire(run_log, rule) == [], rule


@pytest.mark.postgres
def test_stale_heartbeat_fires_for_a_launcher_silent_five_minutes(run_log: str) -> None:
    _reset(run_log)
    with psycopg.connect(run_log, autocommit=True) as conn:
        for launcher, minutes in (("fresh", 0.1), ("edge", 4.5), ("dead", 10), ("ancient", 50)):
            conn.execute(
                b"INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at,"
                b" beat_at) VALUES (%s, 'h', 1, '0', now() - interval '1 day',"
                b" now() - %s * interval '1 minute')",
                (launcher, minutes),
            )
        # A launcher that started and never beat counts from its start.
        conn.execute(
            b"INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at)"
            b" VALUES ('starting', 'h', 1, '0', now() - interval '1 minute')"
        )
    assert _fire(run_log, "stale_heartbeat") == [("ancient", "h", 1), ("dead", "h", 1)]


@pytest.mark.postgres
def test_job_failed_fires_on_the_latest_run_of_alerting_jobs_only(run_log: str) -> None:
    _reset(run_log)
    with psycopg.connect(run_log, autocommit=True) as conn:
        _run(conn, "broken", "success", 90)
        _run(conn, "broken", "failure", 60)
        _run(conn, "recovered", "failure", 60)  # a later success resolves it
        _run(conn, "recovered", "success", 30)
        _run(conn, "timed", "timeout", 5)
        _run(conn, "missed", "skipped", 5, "missed")
        _run(conn, "paused_job", "failure", 60)  # the job is paused now: nothing
        _run(conn, "paused_job", "skipped", 5, "paused")
        conn.execute(b"INSERT INTO job_overrides (job, created_at) VALUES ('paused_job', now())")
        _run(conn, "snoozed_over", "failure", 60)  # its snooze is over: it alerts again
        conn.execute(
            b"INSERT INTO job_overrides (job, paused_until, created_at)"
            b" VALUES ('snoozed_over', now() - interval '1 minute', now() - interval '2 hours')"
        )
        _run(conn, "running_now", "success", 60)  # a run in progress is not an outcome
        _run(conn, "running_now", "running", 1)
        _run(conn, "quiet", "failure", 5)  # not an alerting job
        # A paused slot after a success does not hide the success.
        _run(conn, "recovered", "skipped", 1, "paused")
    assert _fire(run_log, "job_failed") == [
        ("broken", "failure", 1),
        ("missed", "skipped", 1),
        ("snoozed_over", "failure", 1),
        ("timed", "timeout", 1),
    ]


@pytest.mark.postgres
def test_a_storm_of_failures_is_one_instance_per_job(run_log: str) -> None:
    _reset(run_log)
    with psycopg.connect(run_log, autocommit=True) as conn:
        for i in range(200):
            _run(conn, "broken", "failure", 200 - i)
    assert _fire(run_log, "job_failed") == [("broken", "failure", 1)]


@pytest.mark.postgres
def test_chain_overrun_fires_for_running_chain_runs_past_their_deadline(run_log: str) -> None:
    _reset(run_log)
    with psycopg.connect(run_log, autocommit=True) as conn:
        for chain, status, deadline in (
            ("late", "running", "now() - interval '1 minute'"),
            ("late", "running", "now() - interval '1 hour'"),
            ("ontime", "running", "now() + interval '1 hour'"),
            ("done", "failure", "now() - interval '1 hour'"),
            ("unbounded", "running", "NULL"),
        ):
            conn.execute(
                b"INSERT INTO chain_runs (id, chain, dedupe_key, trigger, status, started_at,"
                b" deadline_at) VALUES (%s, %s, %s, 'schedule', %s, now() - interval '2 hours', "
                + deadline.encode()
                + b")",
                (uuid.uuid4(), chain, str(uuid.uuid4()), status),
            )
    assert _fire(run_log, "chain_overrun") == [("late", 2)]


def test_every_rule_is_ok_without_data_and_the_dlq_rule_reads_rabbitmq() -> None:
    rules = _rules()
    assert set(rules) == {"stale_heartbeat", "job_failed", "chain_overrun", "dlq_depth"}
    for name, rule in rules.items():
        assert rule["noDataState"] == "OK", name
        assert rule["condition"] in {d["refId"] for d in rule["data"]}, name
    dlq = rules["dlq_depth"]
    (query,) = [d for d in dlq["data"] if d["datasourceUid"] == "${RUNLANE_PROM_DATASOURCE_UID}"]
    assert 'queue="job_runs.dlq"' in query["model"]["expr"]


# ---------------------------------------------------------------------- the dashboard


@pytest.fixture
async def scraped(tmp_path: Path) -> AsyncIterator[str]:
    """What a launcher's exporter serves (its counters primed on a catalog, its store real)."""
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    catalog = load_catalog(tmp_path / "catalog.yaml")
    store: Store = store_from_url(f"sqlite:///{tmp_path / 'runlane.db'}", create=True)
    await store.open()
    await store.upgrade()
    try:
        metrics = LauncherMetrics()
        metrics.prime(catalog, ("inline",), "L1")
        yield (await Exporter(store, metrics).scrape()).decode()
    finally:
        await store.close()


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
            "info": ("_info",)}  # fmt: skip


def _served_names(text: str) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def test_the_dashboard_names_only_metrics_the_exporter_serves(scraped: str) -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append(dashboard["templating"]["list"][1]["query"])
    named = {n for e in exprs for n in re.findall(r"\brunlane_[a-z_]+\b", e)}
    served = _served_names(scraped)
    assert named, "the dashboard names no metric"
    assert named <= served, f"not served: {sorted(named - served)}"
    # And every family the exporter serves has a panel.
    families = {f.name for f in text_string_to_metric_families(scraped)}
    shown = {f for f in families if any(n.startswith(f) for n in named)}
    assert shown == families, f"no panel: {sorted(families - shown)}"
