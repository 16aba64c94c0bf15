"""The alert rules as pure functions (`runlane.core.alert_rules`): which incidents open, count or
resolve, and what a target is owed next. The store and the notifiers are tested in
tests/integration/test_alerts*.py; here every edge of the decisions themselves."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from runlane.core import alert_rules as rules
from runlane.core.incidents import Incident, Notice
from runlane.core.records import ChainRun, Heartbeat
from runlane.core.runs import Run, RunStatus

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(
    rid: str,
    status: RunStatus,
    finished: float | None,
    *,
    job: str = "nightly",
    end_reason: str | None = None,
    exit_code: int | None = None,
    error_code: str | None = None,
    note: str | None = None,
) -> Run:
    return Run(
        id=rid,
        job=job,
        status=status,
        trigger="schedule",
        dedupe_key=f"k-{rid}",
        attempt=1,
        executor="inline",
        overlap="forbid",
        params={},
        params_raw="{}",
        queued_at=T0,
        finished_at=None if finished is None else at(finished),
        end_reason=end_reason,
        exit_code=exit_code,
        error_code=error_code,
        note=note,
    )


def incident(
    rule: str, key: str, last_seen: float, *, state: str = "open", iid: str = "inc-1"
) -> Incident:
    return Incident(
        id=iid,
        rule=rule,
        fingerprint=f"{rule}:{key}",
        subject=key,
        level="critical",
        state=state,  # type: ignore[arg-type]
        title="t",
        first_seen=at(0),
        last_seen=at(last_seen),
        count=1,
    )


F, S, T, K = RunStatus.FAILURE, RunStatus.SUCCESS, RunStatus.TIMEOUT, RunStatus.SKIPPED


# -- which runs alert ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (F, None, "failure"),
        (T, "deadline", "timeout"),
        (K, "overlap", "skipped"),
        (K, "paused", None),  # a paused job's skipped slot is what the person asked for
        (S, None, None),
        (RunStatus.CANCELLED, None, None),
        (RunStatus.RUNNING, None, None),
    ],
)
def test_failure_kind(status: RunStatus, reason: str | None, kind: str | None) -> None:
    assert rules.failure_kind(run("r", status, 1, end_reason=reason)) == kind


def test_describe_run_names_what_a_person_acts_on_and_bounds_the_note() -> None:
    text = rules.describe_run(
        run("r1", F, 1, end_reason="exit", exit_code=3, error_code="exit_nonzero", note="x" * 900),
        "failure",
    )
    assert text.startswith("run r1 (attempt 1, schedule) failed, end reason exit, exit code 3")
    assert "error exit_nonzero" in text
    assert text.endswith("x" * 300)
    assert "x" * 301 not in text


# -- run_failed ------------------------------------------------------------------------------


def test_failures_of_one_job_open_one_incident_with_their_count_and_latest_run() -> None:
    plan = rules.plan_run_failed(
        [run("a", F, 1), run("b", T, 2), run("c", F, 3)], {"nightly": "critical"}, {}
    )
    assert plan.resolve == ()
    (new,) = plan.record
    assert (new.fingerprint, new.count, new.run_id, new.seen_at) == (
        "run_failed:nightly",
        3,
        "c",
        at(3),
    )
    assert new.level == "critical"
    assert new.title == "nightly failed"


def test_a_success_after_the_failures_opens_nothing_and_a_failure_after_it_counts_alone() -> None:
    ok_last = rules.plan_run_failed([run("a", F, 1), run("b", S, 2)], {"nightly": "warning"}, {})
    assert ok_last.record == ()
    fail_last = rules.plan_run_failed(
        [run("a", F, 1), run("b", S, 2), run("c", F, 3)], {"nightly": "warning"}, {}
    )
    assert [(n.count, n.run_id) for n in fail_last.record] == [(1, "c")]


def test_a_later_success_resolves_the_open_incident_an_earlier_one_does_not() -> None:
    open_ = {"nightly": incident(rules.RUN_FAILED, "nightly", last_seen=5)}
    later = rules.plan_run_failed([run("ok", S, 6)], {"nightly": "critical"}, open_)
    assert [r.incident.id for r in later.resolve] == ["inc-1"]
    assert "succeeded (run ok)" in later.resolve[0].resolution
    earlier = rules.plan_run_failed([run("ok", S, 4)], {"nightly": "critical"}, open_)
    assert earlier.resolve == ()


def test_a_window_read_twice_counts_nothing_twice() -> None:
    open_ = {"nightly": incident(rules.RUN_FAILED, "nightly", last_seen=3)}
    seen = [run("a", F, 1), run("b", F, 3)]
    assert rules.plan_run_failed(seen, {"nightly": "critical"}, open_).record == ()
    more = rules.plan_run_failed([*seen, run("c", F, 4)], {"nightly": "critical"}, open_)
    assert [(n.count, n.run_id) for n in more.record] == [(1, "c")]


def test_resolve_then_fail_again_in_one_window_opens_a_new_incident() -> None:
    open_ = {"nightly": incident(rules.RUN_FAILED, "nightly", last_seen=1)}
    plan = rules.plan_run_failed([run("ok", S, 2), run("x", F, 3)], {"nightly": "critical"}, open_)
    assert len(plan.resolve) == 1
    assert [n.run_id for n in plan.record] == ["x"]


def test_jobs_with_alert_none_open_nothing_but_still_resolve() -> None:
    assert rules.plan_run_failed([run("a", F, 1)], {"nightly": "none"}, {}).record == ()
    assert rules.plan_run_failed([run("a", F, 1)], {}, {}).record == ()  # a job gone from catalog
    open_ = {"nightly": incident(rules.RUN_FAILED, "nightly", last_seen=1)}
    assert len(rules.plan_run_failed([run("ok", S, 2)], {}, open_).resolve) == 1


def test_jobs_are_planned_apart_and_unfinished_rows_ignored() -> None:
    plan = rules.plan_run_failed(
        [run("a", F, 1, job="a"), run("b", F, 2, job="b"), run("c", F, None, job="c")],
        {"a": "warning", "b": "critical", "c": "critical"},
        {},
    )
    assert sorted((n.subject, n.level) for n in plan.record) == [
        ("a", "warning"),
        ("b", "critical"),
    ]


# -- launcher_stale --------------------------------------------------------------------------


def beat(lid: str, age: float, *, interval: float | None = None, now: float = 1000) -> Heartbeat:
    return Heartbeat(
        launcher_id=lid,
        host="h",
        pid=7,
        version="v",
        started_at=at(0),
        beat_at=at(now - age),
        heartbeat_interval=interval,
    )


def test_stale_after_is_the_setting_or_three_of_the_launchers_own_intervals() -> None:
    assert rules.stale_after(beat("l", 0), 300) == 300
    assert rules.stale_after(beat("l", 0, interval=200), 300) == 600


def test_a_silent_launcher_opens_one_critical_incident_at_its_last_beat() -> None:
    plan = rules.plan_launcher_stale(
        [beat("quiet", 301), beat("fresh", 10)], at(1000), 300, {}, self_id="me"
    )
    (new,) = plan.record
    assert (new.subject, new.level, new.seen_at) == ("quiet", "critical", at(699))
    assert "for 301s (stale after 300s)" in (new.detail or "")


def test_a_launcher_never_alerts_on_itself_and_slow_beaters_get_their_own_margin() -> None:
    plan = rules.plan_launcher_stale(
        [beat("me", 5000), beat("slow", 400, interval=200)], at(1000), 300, {}, self_id="me"
    )
    assert plan.record == ()


def test_a_launcher_beating_again_or_gone_resolves_its_incident() -> None:
    open_ = {
        "back": incident(rules.LAUNCHER_STALE, "back", 0, iid="i-back"),
        "gone": incident(rules.LAUNCHER_STALE, "gone", 0, iid="i-gone"),
    }
    plan = rules.plan_launcher_stale([beat("back", 1)], at(1000), 300, open_, self_id="me")
    assert plan.record == ()
    assert {r.incident.id: r.resolution for r in plan.resolve} == {
        "i-back": "launcher back beats again",
        "i-gone": "launcher gone is gone (stopped or pruned)",
    }


# -- chain_overdue and dlq_depth -------------------------------------------------------------


def chain_run(cid: str, deadline: float | None) -> ChainRun:
    return ChainRun(
        id=cid,
        chain="daily",
        dedupe_key=cid,
        trigger="schedule",
        status="running",
        started_at=at(0),
        deadline_at=None if deadline is None else at(deadline),
    )


def test_a_chain_run_past_its_deadline_opens_an_incident_and_ended_ones_are_named() -> None:
    open_ = {"old": incident(rules.CHAIN_OVERDUE, "old", 0)}
    plan, gone = rules.plan_chain_overdue(
        [chain_run("late", 100), chain_run("ontime", 2000), chain_run("none", None)],
        at(160),
        open_,
    )
    assert [(n.fingerprint, n.seen_at) for n in plan.record] == [("chain_overdue:late", at(100))]
    assert "60s past its deadline" in (plan.record[0].detail or "")
    assert gone == ["old"]


def test_a_chain_run_that_overran_and_ended_opens_an_incident_at_its_deadline() -> None:
    ended = replace(
        chain_run("over", 100), status="failure", overrun_at=at(101), finished_at=at(102)
    )
    still = replace(chain_run("still", 100), overrun_at=at(101))  # the running rule's
    never = replace(chain_run("never", 100), status="success", finished_at=at(50))
    plan = rules.plan_chain_overran([ended, still, never])
    assert [(n.fingerprint, n.seen_at, n.level) for n in plan.record] == [
        ("chain_overdue:over", at(100), "warning")
    ]
    assert "ended failure" in (plan.record[0].detail or "")
    assert plan.resolve == ()


def test_dlq_depth_opens_once_resolves_when_drained_and_says_nothing_without_a_broker() -> None:
    assert rules.plan_dlq_depth(None, at(0), None) == rules.Plan()
    (new,) = rules.plan_dlq_depth(4, at(0), None).record
    assert "4 message(s)" in (new.detail or "")
    open_ = incident(rules.DLQ_DEPTH, "job_runs.dlq", 0)
    assert rules.plan_dlq_depth(9, at(1), open_) == rules.Plan()
    assert [r.incident.id for r in rules.plan_dlq_depth(0, at(2), open_).resolve] == ["inc-1"]
    assert rules.plan_dlq_depth(0, at(2), None) == rules.Plan()


# -- what a target is owed -------------------------------------------------------------------


def notice(**kw: object) -> Notice:
    return Notice(incident_id="inc-1", target="ntfy", **kw)  # type: ignore[arg-type]


def test_an_incident_is_sent_firing_once_then_resolved_once() -> None:
    open_ = incident(rules.RUN_FAILED, "j", 0)
    resolved = replace(open_, state="resolved")
    now = at(100)
    assert rules.next_send(open_, None, now, repeat=None) == rules.Send("firing", "none")
    fired = notice(sent_state="firing", sent_at=at(1))
    assert rules.next_send(open_, fired, now, repeat=None) is None
    assert rules.next_send(resolved, fired, now, repeat=None) == rules.Send("resolved", "firing")
    done = notice(sent_state="resolved", sent_at=at(2))
    assert rules.next_send(resolved, done, now, repeat=None) is None


def test_an_incident_resolved_before_anyone_was_told_still_fires_first() -> None:
    resolved = replace(incident(rules.RUN_FAILED, "j", 0), state="resolved")
    assert rules.next_send(resolved, None, at(5), repeat=None) == rules.Send("firing", "none")


def test_repeat_refires_a_long_open_incident_only_when_due() -> None:
    open_ = incident(rules.RUN_FAILED, "j", 0)
    fired = notice(sent_state="firing", sent_at=at(0))
    assert rules.next_send(open_, fired, at(3599), repeat=3600) is None
    send = rules.next_send(open_, fired, at(3600), repeat=3600)
    assert send is not None
    assert send.is_repeat
    assert send.sent_before == at(0)


@pytest.mark.parametrize(
    "held",
    [
        {"gave_up_at": at(0)},
        {"next_attempt_at": at(200)},
        {"claim_until": at(200), "claim_owner": "other"},
    ],
)
def test_nothing_is_sent_while_given_up_backing_off_or_claimed(held: dict[str, object]) -> None:
    assert (
        rules.next_send(incident(rules.RUN_FAILED, "j", 0), notice(**held), at(100), repeat=1)
        is None
    )


def test_backoff_honours_retry_after_and_grows_to_its_cap_with_jitter() -> None:
    assert rules.send_backoff(1, 0.2, 0.0) == 1.0
    assert rules.send_backoff(1, 42.0, 1.0) == 42.0
    assert rules.send_backoff(0, None, 0.0) == 2.0
    assert rules.send_backoff(3, None, 0.0) == 16.0
    assert rules.send_backoff(50, None, 0.0) == rules.BACKOFF_CAP
    assert rules.send_backoff(3, None, 1.0) == 8.0  # jitter takes at most half off
