"""Trigger commands as a person uses them: `schedule`, `emit`, `chain run/show`, `chains`,
`explain`, `docs generate` (real processes, SQLite). Also keeps docs/generated in sync."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runlane.catalog import load_catalog
from runlane.cli.docs_gen import generate_docs
from tests.acceptance.cli_process import cli_env, runlane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "catalog.yaml"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path, RUNLANE_CATALOG=str(EXAMPLE))


def test_generated_docs_are_in_sync_with_the_example_catalog() -> None:
    expected = generate_docs(load_catalog(EXAMPLE))
    generated = ROOT / "docs" / "generated"
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in generated.glob("*.md")}
    assert on_disk == expected, "run: runlane docs generate docs/generated -c examples/catalog.yaml"


def test_docs_generate_writes_table_and_diagrams(env: dict[str, str], tmp_path: Path) -> None:
    proc = runlane("docs", "generate", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0
    assert (
        "| chain | `tuesday-weekly` | `0 16 * * TUE` |"
        in (tmp_path / "out/schedules.md").read_text()
    )
    assert "```mermaid" in (tmp_path / "out/chain-tuesday-weekly.md").read_text()


def test_schedule_table_json_and_markdown(env: dict[str, str]) -> None:
    # 2027-01-19 is a Tuesday in the playoffs season; 2027-03-02 is out of every season.
    proc = runlane("schedule", "--from", "2027-01-19T00:00Z", "--days", "1", "--json", env=env)
    rows = json.loads(proc.stdout)
    chain = [r for r in rows if r["name"] == "tuesday-weekly"]
    assert chain == [
        {
            "kind": "chain",
            "name": "tuesday-weekly",
            "cron": "0 16 * * TUE",
            "tz": "America/Chicago",
            "slot": "2027-01-19T22:00:00Z",
            "local": "2027-01-19T16:00:00-06:00",
            "season": "playoffs",
            "fires": True,
            "reason": "fires",
        }
    ]
    off = json.loads(
        runlane("schedule", "--from", "2027-03-02T00:00Z", "--days", "1", "--json", env=env).stdout
    )
    assert [r["reason"] for r in off if r["kind"] == "chain"] == ["out_of_season"]
    md = runlane(
        "schedule", "--from", "2027-01-19T00:00Z", "--days", "1", "--format", "md", env=env
    )
    assert md.stdout.startswith("| UTC | Local | Kind | Name | Season | Fires |")
    # The range is [from, to): from and to exactly on the chain's weekly slot.
    exact = json.loads(
        runlane(
            "schedule",
            "--from",
            "2027-01-19T22:00Z",
            "--to",
            "2027-01-26T22:00Z",
            "--json",
            env=env,
        ).stdout
    )
    assert [r["slot"] for r in exact if r["name"] == "tuesday-weekly"] == ["2027-01-19T22:00:00Z"]


def test_pause_shows_in_schedule_and_explain(env: dict[str, str]) -> None:
    assert runlane("pause", "session-check", env=env).returncode == 0
    rows = json.loads(runlane("schedule", "--days", "1", "--json", env=env).stdout)
    assert {r["reason"] for r in rows if r["name"] == "session-check"} == {"paused"}
    explained = json.loads(runlane("explain", "session-check", "--json", env=env).stdout)
    assert explained["verdict"] == "not_planned"
    assert any("paused" in line for line in explained["lines"])


def test_explain_shows_a_pause_reason_without_its_control_characters(env: dict[str, str]) -> None:
    reason = "maint \x1b]0;pwned\x07 window"
    assert runlane("pause", "session-check", "--reason", reason, env=env).returncode == 0
    text = runlane("explain", "session-check", env=env).stdout
    assert "\x1b" not in text  # nothing reaches the terminal raw
    assert "\x07" not in text
    assert "maint \\x1b]0;pwned\\x07 window" in text  # shown, escaped


def test_emit_is_idempotent_and_debounced(env: dict[str, str]) -> None:
    first = json.loads(
        runlane(
            "emit", "rumor.signal_created", "--id", "e1", "--data", '{"a": 1}', "--json", env=env
        ).stdout
    )
    assert first["event"]["new"] is True
    assert [r["started"] for r in first["runs"]] == [True]
    again = json.loads(
        runlane("emit", "rumor.signal_created", "--id", "e1", "--json", env=env).stdout
    )
    assert again["event"]["new"] is False
    assert again["runs"] == first["runs"]
    second = json.loads(runlane("emit", "rumor.signal_created", "--json", env=env).stdout)

    def bucket(occurred_at: str) -> int:  # the job's debounce is 30m, epoch-aligned
        return int(datetime.fromisoformat(occurred_at).timestamp()) // 1800

    if bucket(second["event"]["occurred_at"]) == bucket(first["event"]["occurred_at"]):
        assert second["runs"][0]["run_id"] == first["runs"][0]["run_id"]
        assert second["runs"][0]["started"] is False
    else:  # the two emits straddled a window boundary: the second opens a new window, but the
        # job (overlap: forbid) still has the first window's run queued, so it is skipped
        assert second["runs"][0]["run_id"] != first["runs"][0]["run_id"]
        assert second["runs"][0]["started"] is False
        assert second["runs"][0]["status"] == "skipped"
    bad = runlane("emit", "x", "--data", "[1]", env=env)
    assert bad.returncode != 0
    assert "JSON object" in bad.stderr


def test_chain_run_show_and_list(env: dict[str, str]) -> None:
    # lineup-optimizer has `latest: "19:15"` (Chicago): before then it is ahead; after then a
    # chain run started later ignores it. Either way the step waits for its parents.
    started = json.loads(
        runlane("chain", "run", "tuesday-weekly", "--yes", "--json", env=env).stdout
    )
    assert started["status"] == "running"
    steps = {s["step"]: s["status"] for s in started["steps"]}
    assert steps == {
        "sync-league": "queued",
        "metrics": "pending",
        "projections-refresh": "pending",
        "lineup-optimizer": "pending",
    }
    shown = runlane("chain", "show", started["id"][:8], env=env)
    assert "sync-league" in shown.stdout
    assert "lineup-optimizer" in shown.stdout
    listed = json.loads(runlane("chains", "--json", env=env).stdout)
    assert [c["id"] for c in listed] == [started["id"]]
    unknown = runlane("chain", "run", "nope", env=env)
    assert unknown.returncode != 0
    assert "unknown chain" in unknown.stderr


def test_explain_chain_slots_in_and_out_of_season(env: dict[str, str]) -> None:
    # Tuesday 2026-07-07 16:00 Chicago is before the regular season (2026-09-08..).
    off = json.loads(
        runlane("explain", "tuesday-weekly", "--at", "2026-07-08T00:00Z", "--json", env=env).stdout
    )
    assert off["verdict"] == "out_of_season"
    assert off["slot"] == "2026-07-07T21:00:00Z"
    assert any("regular (2026-09-08..2027-01-05)" in line for line in off["lines"])
    # In season, nobody planned it yet; then a person starts the chain by hand, which does not
    # take the scheduled slot.
    on = json.loads(
        runlane("explain", "tuesday-weekly", "--at", "2026-09-09T00:00Z", "--json", env=env).stdout
    )
    assert on["verdict"] == "not_planned"
    assert any("in season 'regular'" in line for line in on["lines"])


def test_explain_a_job_that_runs_as_a_chain_step(env: dict[str, str]) -> None:
    proc = runlane("explain", "metrics-extractor", "--at", "2026-07-08T00:00Z", "--json", env=env)
    found = json.loads(proc.stdout)
    assert found["verdict"] == "out_of_season"
    assert any("step of 'tuesday-weekly'" in line for line in found["lines"])


ACTING = """
version: 1
defaults: {executor: inline}
jobs:
  check: {command: ["true"]}
  deploy: {command: [echo, DEPLOYED], acts: true}
  notify: {command: ["true"], on_event: [{key: go.now}]}
  ship: {command: ["true"], acts: true, on_event: [{key: go.now}]}
chains:
  shipit:
    steps:
      check: {}
      deploy: {after: [{step: check, on: success}]}
  safe:
    steps:
      check: {}
"""


@pytest.fixture
def acting_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    (tmp_path / "acting.yaml").write_text(ACTING)
    return {**env, "RUNLANE_CATALOG": str(tmp_path / "acting.yaml")}


def recorded(env: dict[str, str]) -> tuple[list[object], list[object]]:
    runs = json.loads(runlane("runs", "--json", env=env).stdout)
    chains = json.loads(runlane("chains", "--json", env=env).stdout)
    return runs, chains


def test_a_person_starting_a_chain_with_an_acting_step_must_confirm(
    acting_env: dict[str, str],
) -> None:
    """`acts: true` needs --yes from a person however the job is reached: `runlane run`, a
    step of a chain they start (even a later step), a listener of an event they emit. Refused
    before anything is recorded."""
    refused = runlane("chain", "run", "shipit", env=acting_env)
    assert refused.returncode == 2
    assert "deploy" in refused.stderr
    assert "--yes" in refused.stderr
    assert recorded(acting_env) == ([], [])
    assert runlane("chain", "run", "safe", env=acting_env).returncode == 0  # nothing acts
    started = runlane("chain", "run", "shipit", "--yes", "--json", env=acting_env)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["chain"] == "shipit"


def test_a_person_emitting_an_event_that_starts_an_acting_job_must_confirm(
    acting_env: dict[str, str],
) -> None:
    refused = runlane("emit", "go.now", env=acting_env)
    assert refused.returncode == 2
    assert "ship" in refused.stderr
    assert "--yes" in refused.stderr
    assert recorded(acting_env)[0] == []
    emitted = runlane("emit", "go.now", "--yes", "--json", env=acting_env)
    assert emitted.returncode == 0, emitted.stderr
    assert sorted(r["job"] for r in json.loads(emitted.stdout)["runs"]) == ["notify", "ship"]


DENSE = """
version: 1
defaults: {executor: inline}
jobs:
  every-minute: {command: ["true"], schedules: [{cron: "* * * * *"}]}
  nightly: {command: ["true"], schedules: [{cron: "0 3 * * *"}]}
"""


def test_schedule_lists_every_schedules_slots_and_says_when_it_cuts_the_range(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A long range of a dense schedule: the table shows the earliest 100,000 slots of all the
    schedules together (the nightly one keeps its slots) and says on stderr where it stopped."""
    (tmp_path / "dense.yaml").write_text(DENSE)
    dense = {**env, "RUNLANE_CATALOG": str(tmp_path / "dense.yaml")}
    week = runlane("schedule", "--from", "2027-01-01T00:00Z", "--days", "7", env=dense)
    assert week.returncode == 0
    assert week.stderr == ""
    lines = week.stdout.splitlines()
    assert lines[0].split() == ["utc", "local", "kind", "name", "season", "fires"]
    assert len(lines) == 1 + 7 * 1440 + 7
    assert sum(" nightly " in line for line in lines) == 7
    cut = runlane("schedule", "--from", "2027-01-01T00:00Z", "--days", "80", env=dense)
    assert cut.returncode == 0
    assert "more than 100,000 slots" in cut.stderr
    lines = cut.stdout.splitlines()
    assert len(lines) == 1 + 100_000
    nightly = [line for line in lines if " nightly " in line]
    assert len(nightly) == 70  # 100,000 slots reach 2027-03-11, past its 03:00
    assert nightly[-1].startswith("2027-03-11T03:00:00Z")


def test_an_event_id_given_again_with_another_key_is_refused(acting_env: dict[str, str]) -> None:
    """The id names the event already recorded: emitting it again under another key starts
    nothing (not the first key's listeners, which nobody confirmed for) and says why."""
    first = runlane("emit", "quiet.key", "--id", "evt-1", env=acting_env)
    assert first.returncode == 0, first.stderr
    again = runlane("emit", "go.now", "--id", "evt-1", "--yes", env=acting_env)
    assert again.returncode == 2
    assert "was recorded with key 'quiet.key', not 'go.now'" in again.stderr
    assert recorded(acting_env)[0] == []


REMOVABLE = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m}}
jobs:
  ok: {{command: [{sys.executable}, -c, "pass"]}}
chains:
  rm:
    steps:
      first: {{job: ok}}
      second: {{job: ok, after: [{{step: first, on: success}}]}}
"""


def test_a_run_of_a_removed_chain_is_listed_by_doctor_and_ended_by_cancel(
    tmp_path: Path,
) -> None:
    """A chain run whose chain was then deleted from the catalog: `doctor` said nothing, and
    `runlane cancel ID` said `no run with id`, so nothing could end it. Doctor lists it; cancel
    takes a chain run id (or a prefix of one) and ends it with its unfinished steps."""
    env = cli_env(tmp_path, REMOVABLE)
    started = json.loads(runlane("chain", "run", "rm", "--json", env=env).stdout)
    (first,) = [s for s in started["steps"] if s["status"] == "queued"]
    (tmp_path / "catalog.yaml").write_text(REMOVABLE.split("chains:")[0])

    doctor = runlane("doctor", "--json", env=env)
    assert doctor.returncode == 1
    (finding,) = [f for f in json.loads(doctor.stdout) if f["run_id"] == started["id"]]
    assert finding["level"] == "error"
    assert finding["message"].startswith(f"chain run {started['id']} (rm, running since ")
    assert (
        "chain 'rm' is not in the catalog; no launcher is running to end it" in (finding["message"])
    )
    assert f"`runlane cancel {started['id']}`" in finding["message"]

    cancel = runlane("cancel", started["id"][:8], env=env)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.splitlines() == [
        f"cancelled chain run {started['id']} (rm)",
        f"  cancelled run {first['run_id']} (ok, cancelled)",
    ]
    (ended,) = json.loads(runlane("chains", "--json", env=env).stdout)
    assert (ended["status"], ended["end_reason"]) == ("failure", "cancelled")
    step = json.loads(runlane("runs", first["run_id"], "--json", env=env).stdout)
    assert step["status"] == "cancelled"
    again = runlane("cancel", started["id"], env=env)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"error: chain run {started['id']} has already ended: failure (cancelled)"
    )
    assert runlane("doctor", env=env).returncode == 0
    unknown = runlane("cancel", "abcdef0123", env=env)
    assert unknown.stderr.strip() == "error: no run with id 'abcdef0123'"


SNOOZABLE = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m}}
jobs:
  woke: {{command: [{sys.executable}, -c, "pass"], schedules: [{{cron: "* * * * *", tz: UTC}}]}}
  dozing: {{command: [{sys.executable}, -c, "pass"], schedules: [{{cron: "* * * * *", tz: UTC}}]}}
"""


def test_a_snooze_that_has_ended_is_not_shown_as_a_pause(tmp_path: Path) -> None:
    """`runlane pause t5 --until 6s`, 15 s later: `jobs` still said `"paused": true` with a
    past `paused_until`, and `explain` "paused until <past time>", while the job fired again.
    Both compare the snooze with the database's now: ended, it is no pause."""
    import asyncio

    from runlane.service.wiring import store_from_url

    env = cli_env(tmp_path, SNOOZABLE)

    async def snooze() -> datetime:
        store = store_from_url(env["RUNLANE_DATABASE_URL"])
        await store.open()
        try:
            now = await store.now()
            # Set in the store directly: `pause --until` takes only a future time, and the
            # test does not wait for one to pass.
            await store.set_override(
                "woke", paused_until=now - timedelta(seconds=9), reason="deploy", by="test"
            )
            await store.set_override(
                "dozing", paused_until=now + timedelta(hours=1), reason="deploy", by="test"
            )
            return now
        finally:
            await store.close()

    asyncio.run(snooze())
    jobs = {j["job"]: j for j in json.loads(runlane("jobs", "--json", env=env).stdout)}
    assert {k: jobs["woke"][k] for k in ("paused", "paused_until", "pause_reason")} == {
        "paused": False,
        "paused_until": None,
        "pause_reason": None,
    }
    assert jobs["dozing"]["paused"] is True
    assert jobs["dozing"]["pause_reason"] == "deploy"
    table = runlane("jobs", env=env).stdout
    (woke,) = [line for line in table.splitlines() if "woke" in line]
    assert "active" in woke
    assert "paused" not in woke
    woke_explained = json.loads(runlane("explain", "woke", "--json", env=env).stdout)
    assert not [line for line in woke_explained["lines"] if "paused" in line]
    dozing_explained = json.loads(runlane("explain", "dozing", "--json", env=env).stdout)
    assert [line for line in dozing_explained["lines"] if "paused until" in line]
