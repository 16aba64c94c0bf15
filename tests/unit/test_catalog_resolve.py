"""Catalog.resolve: defaults merged in, the deadline cap, and unknown-job hints."""

from __future__ import annotations

import dataclasses

import pytest

from runlane.catalog import Catalog, Schedule, parse_catalog_text
from runlane.errors import UnknownJob

TEXT = """
version: 1
global: {max_deadline: 30m, manual_queue_ttl: 5m, kill_grace: 20s, timezone: America/Chicago}
profiles:
  core: {image: "app:${TAG}", env: {A: "1", PORT: 8080}}
defaults: {executor: inline, overlap: queue, max_attempts: 2, alert: info, log_max_bytes: 1MiB}
jobs:
  plain:
    command: [echo, hi]
  custom:
    profile: core
    command: [python3, -m, app]
    description: does things
    executor: pod
    overlap: allow
    max_attempts: 5
    deadline: 10m
    kill_grace: 5s
    log_max_bytes: 100MB
    alert: critical
    acts: true
    env: {B: two}
    schedules:
      - {cron: "0 3 * * *"}
      - {cron: "@hourly", tz: UTC, catch_up: 15m}
    on_event: [{key: data.ready, debounce: 1m}]
"""


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return parse_catalog_text(TEXT)


def test_defaults_fill_every_field(catalog: Catalog) -> None:
    job = catalog.resolve("plain")
    assert job.name == "plain"
    assert job.command == ("echo", "hi")
    assert job.profile is None
    assert job.profile_spec is None
    assert job.executor == "inline"
    assert job.overlap == "queue"
    assert job.max_attempts == 2
    assert job.deadline_seconds == 30 * 60  # defaults.deadline 1h, capped by max_deadline 30m
    assert job.kill_grace_seconds == 20.0
    assert job.alert == "info"
    assert job.acts is False
    assert dict(job.params) == {}
    assert job.schedules == ()
    assert job.on_event == ()
    assert job.description is None
    assert dict(job.env) == {}
    assert job.queue_ttl_seconds == 5 * 60
    assert job.log_max_bytes == 1024 * 1024


def test_job_fields_override_defaults(catalog: Catalog) -> None:
    job = catalog.resolve("custom")
    assert job.profile == "core"
    assert job.profile_spec is not None
    assert job.profile_spec.image == "app:${TAG}"
    assert job.profile_spec.env == {"A": "1", "PORT": "8080"}
    assert (job.executor, job.overlap, job.max_attempts, job.alert) == (
        "pod",
        "allow",
        5,
        "critical",
    )
    assert job.deadline_seconds == 600.0
    assert job.kill_grace_seconds == 5.0
    assert job.log_max_bytes == 100_000_000
    assert job.acts is True
    assert job.description == "does things"
    assert dict(job.env) == {"B": "two"}
    assert job.on_event[0].key == "data.ready"
    assert job.on_event[0].debounce == 60.0


def test_schedules_get_the_global_time_zone(catalog: Catalog) -> None:
    first, second = catalog.resolve("custom").schedules
    assert first == Schedule(cron="0 3 * * *", tz="America/Chicago", catch_up=0.0)
    assert second.tz == "UTC"
    assert second.catch_up == 900.0
    assert second.cron_expr.hour_is_wildcard
    assert catalog.jobs["custom"].schedules[0].tz is None  # the model keeps what the file said


def test_resolved_job_is_frozen(catalog: Catalog) -> None:
    job = catalog.resolve("plain")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.max_attempts = 3  # type: ignore[misc]


def test_unknown_job_suggests_a_close_name(catalog: Catalog) -> None:
    with pytest.raises(UnknownJob) as info:
        catalog.resolve("custon")
    assert str(info.value) == "unknown job 'custon' (did you mean 'custom'?)"
    with pytest.raises(UnknownJob) as info:
        catalog.resolve("zzzzzz")
    assert str(info.value) == "unknown job 'zzzzzz'"


def test_job_names_are_sorted(catalog: Catalog) -> None:
    assert catalog.job_names() == ["custom", "plain"]


def test_model_default_executor_is_pod() -> None:
    catalog = parse_catalog_text("version: 1\njobs: {a: {command: [echo]}}\n")
    job = catalog.resolve("a")
    assert job.executor == "pod"
    assert job.overlap == "forbid"
    assert job.max_attempts == 1
    assert job.deadline_seconds == 3600.0
    assert job.alert == "warning"
    assert job.kill_grace_seconds == 30.0
    assert job.queue_ttl_seconds == 1800.0
    assert job.log_max_bytes == 10 * 1024 * 1024
    assert catalog.global_.max_concurrent_pods == 10
    assert catalog.global_.start_timeout == 600.0
    assert catalog.global_.max_deadline == 7200.0


def test_durations_accept_numbers_as_seconds() -> None:
    catalog = parse_catalog_text(
        "version: 1\njobs: {a: {command: [echo], deadline: 90, kill_grace: 1.5}}\n"
    )
    job = catalog.resolve("a")
    assert job.deadline_seconds == 90.0
    assert job.kill_grace_seconds == 1.5


def test_seasons_are_inclusive_windows() -> None:
    from datetime import date

    catalog = parse_catalog_text(
        "version: 1\nglobal: {seasons: {regular: {start: 2026-09-01, end: 2026-12-31}}}\n"
    )
    season = catalog.global_.seasons["regular"]
    assert season.contains(date(2026, 9, 1))
    assert season.contains(date(2026, 12, 31))
    assert not season.contains(date(2027, 1, 1))


@pytest.mark.parametrize("value", ["0", "86400", "20270105", "1.5", "'86400'"])
def test_a_season_date_written_as_a_number_is_refused(value: str) -> None:
    """pydantic reads a number as seconds since 1970; a season date is only YYYY-MM-DD."""
    from runlane.errors import CatalogError

    text = f"version: 1\nglobal:\n  seasons: {{s: {{start: 2026-09-01, end: {value}}}}}\n"
    with pytest.raises(CatalogError) as info:
        parse_catalog_text(text)
    assert info.value.problems == [
        f"catalog.yaml:3:41: global.seasons.s.end: expected a date as YYYY-MM-DD, got {value}"
    ]


def test_the_hosts_localtime_is_not_a_catalog_time_zone() -> None:
    """`localtime` is a file in the zone database linking to the host's own zone: two launchers
    on differently set hosts would fire one schedule at two instants."""
    from runlane.errors import CatalogError

    text = (
        "version: 1\nglobal: {timezone: localtime}\njobs:\n"
        "  a: {command: [echo], schedules: [{cron: '@daily', tz: localtime}]}\n"
    )
    with pytest.raises(CatalogError) as info:
        parse_catalog_text(text)
    assert [p.split(": ", 1)[1] for p in info.value.problems] == [
        "global.timezone: time zone 'localtime' is whatever the host is set to, which differs "
        "between hosts and containers; name the zone, e.g. Europe/Berlin or UTC",
        "jobs.a.schedules[0].tz: time zone 'localtime' is whatever the host is set to, which "
        "differs between hosts and containers; name the zone, e.g. Europe/Berlin or UTC",
    ]
