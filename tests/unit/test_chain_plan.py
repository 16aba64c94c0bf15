"""Chain planning as a pure function of step statuses and now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane.catalog import parse_catalog_text
from runlane.core.chains import StepSpec, plan_chain, step_dedupe_key, step_of
from runlane.core.records import ChainRun
from runlane.service.chains import step_specs

NOW = datetime(2026, 9, 8, 21, 0, tzinfo=UTC)
STEPS = {
    "sync": StepSpec("sync", "sync"),
    "proj": StepSpec("proj", "proj", (("sync", "success"),)),
    "metrics": StepSpec("metrics", "metrics-extractor", (("sync", "success"),)),
    "lineup": StepSpec("lineup", "lineup", (("proj", "finish"), ("metrics", "finish"))),
}


def test_roots_start_first() -> None:
    plan = plan_chain(STEPS, {}, NOW, None)
    assert plan.start == ("sync",)
    assert not plan.done


def test_success_releases_dependents() -> None:
    plan = plan_chain(STEPS, {"sync": "success"}, NOW, None)
    assert set(plan.start) == {"proj", "metrics"}


def test_failure_skips_success_dependents_and_finish_dependents_still_run() -> None:
    plan = plan_chain(STEPS, {"sync": "failure"}, NOW, None)
    assert set(plan.skip) == {("proj", "upstream_failed"), ("metrics", "upstream_failed")}
    assert plan.start == ("lineup",)  # on: finish — skipped parents are finished


def test_transitive_upstream_failed() -> None:
    steps = {
        "a": StepSpec("a", "a"),
        "b": StepSpec("b", "b", (("a", "success"),)),
        "c": StepSpec("c", "c", (("b", "success"),)),
    }
    plan = plan_chain(steps, {"a": "timeout"}, NOW, None)
    assert plan.skip == (("b", "upstream_failed"), ("c", "upstream_failed"))
    assert plan.done
    assert plan.outcome == "failure"


def test_latest_starts_a_step_while_a_parent_runs() -> None:
    steps = {**STEPS, "lineup": StepSpec("lineup", "lineup", STEPS["lineup"].after, NOW)}
    waiting = plan_chain(
        steps,
        {"sync": "success", "proj": "running", "metrics": "success"},
        NOW - timedelta(seconds=1),
        None,
    )
    assert waiting.start == ()
    due = plan_chain(steps, {"sync": "success", "proj": "running", "metrics": "success"}, NOW, None)
    assert due.start == ("lineup",)


def test_deadline_skips_unstarted_and_expires_queued_steps() -> None:
    plan = plan_chain(
        STEPS,
        {"sync": "success", "proj": "running", "metrics": "queued"},
        NOW,
        NOW - timedelta(minutes=1),
    )
    assert plan.overrun
    assert plan.skip == (("lineup", "chain_timeout"),)
    assert plan.expire_queued == ("metrics",)
    assert not plan.done  # proj still runs


def test_all_success_is_a_successful_chain() -> None:
    done = plan_chain(STEPS, dict.fromkeys(STEPS, "success"), NOW, None)
    assert done.done
    assert done.outcome == "success"
    assert done.start == ()


def test_step_keys_allow_the_same_job_twice() -> None:
    root = "0b8f5a2e-0000-4000-8000-000000000000"
    a = step_dedupe_key("sync", "sync", root)
    b = step_dedupe_key("sync-again", "sync", root)
    assert a != b
    assert step_of(a, "sync", root) == "sync"
    assert step_of(b + "#2", "sync", root) == "sync-again"
    assert step_of("other@x", "sync", root) is None


def test_a_latest_in_a_spring_forward_gap_is_the_first_instant_after_it() -> None:
    # Berlin skips 02:00-03:00 on 2026-03-29. `latest: "02:30"` is due as a cron slot at 02:30
    # would fire: at 03:00 CEST (01:00 UTC), not an hour later at 03:30.
    catalog = parse_catalog_text(
        """
version: 1
global: {timezone: Europe/Berlin}
defaults: {executor: inline}
jobs:
  a: {command: ["true"]}
  b: {command: ["true"]}
chains:
  nightly:
    steps:
      a: {job: a}
      b: {job: b, after: [{step: a, on: finish}], latest: "02:30"}
"""
    )
    midnight = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)  # 00:00 CET on the 29th
    run = ChainRun(
        id="c1",
        chain="nightly",
        dedupe_key="c1",
        trigger="schedule",
        status="running",
        started_at=midnight,
        scheduled_for=midnight,
    )
    specs = step_specs(catalog, catalog.chains["nightly"], run)
    assert specs["b"].latest == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
