"""Settings too large to use are refused when they are read, in the one-line `NAME='value': …`
form of every other bad setting, instead of crashing `runlane serve` later."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlane.core.durations import MAX_DURATION_SECONDS
from runlane.errors import ConfigError
from runlane.service.config import ENV_NAMES, Settings

DURATIONS = [
    name for field, name in ENV_NAMES.items() if isinstance(getattr(Settings(), field), float)
]


def _refused(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_every_duration_setting_takes_up_to_100_years_and_no_more() -> None:
    assert set(DURATIONS) == {
        "RUNLANE_LEASE_TTL",
        "RUNLANE_LEASE_RENEW_INTERVAL",
        "RUNLANE_CLAIM_INTERVAL",
        "RUNLANE_ORPHAN_CHECK_INTERVAL",
        "RUNLANE_ORPHAN_GRACE",
        "RUNLANE_HEARTBEAT_INTERVAL",
        "RUNLANE_SHUTDOWN_GRACE",
        "RUNLANE_RETRY_BASE",
        "RUNLANE_DB_TIMEOUT",
        "RUNLANE_HTTP_REQUEST_TIMEOUT",
        "RUNLANE_ALERT_INTERVAL",
    }
    # (The renewal interval must be shorter than the TTL; the database bound has its own range.)
    at_limit = {
        name: "36500d"
        for name in DURATIONS
        if name
        not in (
            "RUNLANE_LEASE_RENEW_INTERVAL",
            "RUNLANE_DB_TIMEOUT",
            "RUNLANE_HTTP_REQUEST_TIMEOUT",
            "RUNLANE_ALERT_INTERVAL",
        )
    }
    settings = Settings.from_env(at_limit)
    assert settings.lease_ttl == settings.heartbeat_interval == MAX_DURATION_SECONDS
    for name in DURATIONS:
        assert _refused({name: "36500d1s"}) == (
            f"{name}='36500d1s': a duration cannot be longer than 36500d (100 years), "
            "got '36500d1s'"
        )


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("value", ["100000000d", "1000000000d", "99999999999999999999"])
def test_durations_longer_than_100_years_are_refused(name: str, value: str) -> None:
    assert _refused({name: value}) == (
        f"{name}={value!r}: a duration cannot be longer than 36500d (100 years), got {value!r}"
    )


def test_numbers_beyond_any_float_are_refused_in_one_short_line() -> None:
    message = _refused({"RUNLANE_ORPHAN_GRACE": "9" * 400 + "s"})
    assert "cannot be longer than 36500d (100 years)" in message
    assert len(message) < 300
    # Spelled as floats, infinity and NaN are not durations at all.
    for value in ("nan", "NaN", "inf", "-inf", "1e999"):
        assert _refused({"RUNLANE_CLAIM_INTERVAL": value}) == (
            f"RUNLANE_CLAIM_INTERVAL={value!r}: expected a duration such as 30s, 10m, 2h or 1d, "
            f"got {value!r}"
        )


@pytest.mark.parametrize(
    ("name", "limit"),
    [("RUNLANE_CONCURRENCY", 10000), ("RUNLANE_SPAWN_THREADS", 256), ("RUNLANE_SPAWNERS", 64)],
)
def test_whole_numbers_have_an_upper_bound(name: str, limit: int) -> None:
    field = next(f for f, n in ENV_NAMES.items() if n == name)
    assert getattr(Settings.from_env({name: str(limit)}), field) == limit
    for value in (str(limit + 1), "99999999999999999999"):
        assert _refused({name: value}) == f"{name}={value!r}: must be at most {limit}"
    # Past what int() reads (4300 digits): still "too large", in one short line.
    message = _refused({name: "9" * 5000})
    assert message.endswith(f": must be at most {limit}")
    assert len(message) < 120
    for value in ("1e9", "inf", "nan", "16.0"):
        assert _refused({name: value}) == f"{name}={value!r}: expected a whole number"


def test_the_database_bound_follows_the_lease_within_its_range() -> None:
    assert Settings.from_env({}).db_timeout == 10.0
    # A third of a shorter lease (a renewal that gives up can try again before it expires),
    # never under a second.
    assert Settings.from_env({"RUNLANE_LEASE_TTL": "15s"}).db_timeout == 5.0
    assert Settings.from_env({"RUNLANE_LEASE_TTL": "1500ms"}).db_timeout == 1.0
    assert Settings.from_env({"RUNLANE_DB_TIMEOUT": "30s"}).db_timeout == 30.0
    assert Settings.from_env({"RUNLANE_DB_TIMEOUT": "5m"}).db_timeout == 300.0
    assert _refused({"RUNLANE_DB_TIMEOUT": "500ms"}) == (
        "RUNLANE_DB_TIMEOUT='500ms': must be at least 1s"
    )
    assert _refused({"RUNLANE_DB_TIMEOUT": "301s"}) == (
        "RUNLANE_DB_TIMEOUT='301s': must be at most 5m"
    )
    assert _refused({"RUNLANE_DB_TIMEOUT": "0s"}) == (
        "RUNLANE_DB_TIMEOUT='0s': must be greater than zero"
    )


def test_inline_spawn_takes_auto_thread_loop_or_process_and_nothing_else() -> None:
    for value in ("auto", "thread", "loop", "process"):
        assert Settings.from_env({"RUNLANE_INLINE_SPAWN": value}).inline_spawn == value
    assert Settings.from_env({}).inline_spawn == "auto"
    message = _refused({"RUNLANE_INLINE_SPAWN": "fork"})
    assert message.startswith(
        "RUNLANE_INLINE_SPAWN='fork': expected one of auto, thread, loop, process"
    )


def test_the_management_url_is_masked_and_checked() -> None:
    url = "http://guest:s3cret@127.0.0.1:15672"
    shown = Settings.from_env({"RUNLANE_RABBITMQ_MANAGEMENT_URL": url}).public()
    assert shown["rabbitmq_management_url"] == "http://guest:***@127.0.0.1:15672"
    assert Settings.from_env({}).rabbitmq_management_url == ""
    message = _refused({"RUNLANE_RABBITMQ_MANAGEMENT_URL": "amqp://guest:s3cret@h/"})
    assert message.startswith("RUNLANE_RABBITMQ_MANAGEMENT_URL='amqp://guest:***@h/': expected")
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("value", "mode", "off_loop", "idle_on_loop", "spawn_mode"),
    [
        ("auto", "spawner", False, True, "spawners+idle-loop"),
        ("process", "spawner", False, False, "spawners"),
        ("thread", "guardian", True, False, "threads+guardian"),
        ("loop", "guardian", False, False, "loop+guardian"),
    ],
)
def test_the_launchers_inline_executor_spawns_where_the_setting_says(
    tmp_path: Path, value: str, mode: str, off_loop: bool, idle_on_loop: bool, spawn_mode: str
) -> None:
    from runlane.adapters.local.executor import InlineExecutor
    from runlane.service.wiring import build_executors

    settings = Settings.from_env({"RUNLANE_INLINE_SPAWN": value, "RUNLANE_LOG_DIR": str(tmp_path)})
    inline = build_executors(settings, start_timeout=60)["inline"]
    assert isinstance(inline, InlineExecutor)
    try:
        assert (inline.pdeathsig_mode, inline.spawn_off_loop) == (mode, off_loop)
        assert inline.idle_on_loop is idle_on_loop
        assert inline.spawn_mode == spawn_mode  # what the launcher's start line says
    finally:
        inline.close()


async def test_runlane_spawners_sets_how_many_spawner_processes_run(tmp_path: Path) -> None:
    from runlane.adapters.local.executor import InlineExecutor
    from runlane.ports import ExecutionSpec
    from runlane.service.wiring import build_executors

    assert Settings.from_env({}).spawners == 2
    assert _refused({"RUNLANE_SPAWNERS": "0"}) == "RUNLANE_SPAWNERS='0': must be at least 1"
    settings = Settings.from_env({"RUNLANE_SPAWNERS": "3", "RUNLANE_LOG_DIR": str(tmp_path)})
    inline = build_executors(settings, start_timeout=60)["inline"]
    assert isinstance(inline, InlineExecutor)
    try:
        # The first run of an idle launcher is spawned on its loop; the next, while it runs,
        # by a spawner: then they start.
        await inline.start(ExecutionSpec("r1", "j", 1, "manual", ["sleep", "60"], {}, {}, 60, 1))
        assert inline.spawner_pids == []
        await inline.start(ExecutionSpec("r2", "j", 1, "manual", ["true"], {}, {}, 60, 1))
        assert len(inline.spawner_pids) == 3
    finally:
        await inline.shutdown(grace=0)
        inline.close()


def test_adapter_durations_read_from_the_environment_have_one_form() -> None:
    # The Slurm poll interval and the pod Jobs' TTL are read as the settings' durations are:
    # a duration or a number of seconds, bounded, and one line naming the variable if not.
    from runlane.adapters.kubernetes.config import job_ttl_seconds
    from runlane.adapters.slurm.config import poll_interval

    assert poll_interval({}) == 5.0
    assert poll_interval({"RUNLANE_SLURM_POLL_INTERVAL": "0.2"}) == 0.2
    assert poll_interval({"RUNLANE_SLURM_POLL_INTERVAL": "2m"}) == 120.0
    assert job_ttl_seconds({}) == 86_400
    assert job_ttl_seconds({"RUNLANE_POD_JOB_TTL": "1h30m"}) == 5_400
    refused = {
        ("RUNLANE_SLURM_POLL_INTERVAL", "0.01"): "cannot be shorter than 50ms",
        ("RUNLANE_SLURM_POLL_INTERVAL", "11m"): "cannot be longer than 10m",
        ("RUNLANE_SLURM_POLL_INTERVAL", "often"): "expected a duration",
        ("RUNLANE_POD_JOB_TTL", "9m"): "cannot be shorter than 10m (a finished Job must stay",
        ("RUNLANE_POD_JOB_TTL", "31d"): "cannot be longer than 30d",
        ("RUNLANE_POD_JOB_TTL", "0"): "must be greater than zero",
    }
    for (name, value), said in refused.items():
        read = poll_interval if name == "RUNLANE_SLURM_POLL_INTERVAL" else job_ttl_seconds
        with pytest.raises(ConfigError) as err:
            read({name: value})
        assert str(err.value).startswith(f"{name}={value!r}: "), err.value
        assert said in str(err.value)


def test_runlane_event_loop_picks_serves_loop_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import sys

    from runlane.service.runtime import event_loop_factory

    uvloop = pytest.importorskip("uvloop")

    assert Settings.from_env({}).event_loop == "auto"
    assert Settings.from_env({"RUNLANE_EVENT_LOOP": " uvloop "}).event_loop == "uvloop"
    assert _refused({"RUNLANE_EVENT_LOOP": "tokio"}) == (
        "RUNLANE_EVENT_LOOP='tokio': expected one of auto, uvloop, asyncio"
    )
    assert event_loop_factory("asyncio") is None
    for choice in ("auto", "uvloop"):
        factory = event_loop_factory(choice)
        assert factory is uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            assert type(runner.get_loop()).__module__.startswith("uvloop")
    # Where uvloop is not installed: `auto` falls back to asyncio's loop, `uvloop` says so.
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert event_loop_factory("auto") is None
    with pytest.raises(ConfigError) as info:
        event_loop_factory("uvloop")
    assert str(info.value).startswith("RUNLANE_EVENT_LOOP='uvloop': uvloop is not installed")
    assert "RUNLANE_EVENT_LOOP=asyncio" in str(info.value)


@pytest.mark.parametrize("value", ["1ms", "999ms", "0.5"])
def test_a_lease_ttl_under_a_second_is_refused(value: str) -> None:
    # Every lease would run out between two renewals (or before a claim's commit): runs taken
    # over and re-run again and again.
    assert _refused({"RUNLANE_LEASE_TTL": value}) == (
        f"RUNLANE_LEASE_TTL={value!r}: cannot be shorter than 1s "
        "(a lease must outlast a renewal's round trip to the database)"
    )


def test_a_one_second_lease_ttl_is_accepted_and_its_renewal_must_be_shorter() -> None:
    settings = Settings.from_env({"RUNLANE_LEASE_TTL": "1s"})
    assert (settings.lease_ttl, round(settings.lease_renew_interval, 3)) == (1.0, 0.333)
    for renew in ("1s", "2s"):
        assert _refused({"RUNLANE_LEASE_TTL": "1s", "RUNLANE_LEASE_RENEW_INTERVAL": renew}) == (
            f"RUNLANE_LEASE_RENEW_INTERVAL ({renew[:-1]}s) must be shorter than "
            "RUNLANE_LEASE_TTL (1s); a third of it is the default"
        )
