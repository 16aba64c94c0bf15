"""What `run --wait` / `logs --follow` say when a launcher keeps the followed run for repair:
the advice follows what the CLI knows (the file, the live launchers), never a wrong restart."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from runlane.core.runs import Run, RunStatus
from runlane.service.operations.notices import repair_notice

T0 = datetime(2031, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
KEPT = Run(
    id="r1",
    job="fresh",
    status=RunStatus.QUEUED,
    trigger="cli",
    dedupe_key="k",
    attempt=1,
    executor="inline",
    overlap="allow",
    params={},
    params_raw="{}",
    queued_at=T0,
    error_code="unknown_job",
    not_before=T0,
)


def test_a_job_the_file_has_and_no_live_launcher_has_asks_for_a_restart() -> None:
    text = repair_notice(KEPT, "catalog.yaml", in_file=True, known_live=False)
    assert text == (
        "run r1 waits for a restart: the launcher that claimed it loaded catalog.yaml before job "
        "'fresh' was added and keeps the run for repair; restart `runlane serve`: the restarted "
        "launcher starts the run at once"
    )


def test_no_restart_is_asked_for_when_a_live_launcher_has_the_job() -> None:
    text = repair_notice(KEPT, "catalog.yaml", in_file=True, known_live=True)
    assert "restart" not in text
    assert "a launcher running now has the job" in text
    assert text.endswith("next try (2031-01-02T03:04:05Z)")


def test_a_job_gone_from_the_file_too_is_to_cancel_not_to_restart_for() -> None:
    text = repair_notice(KEPT, "catalog.yaml", in_file=False, known_live=False)
    assert "restart" not in text
    assert "is not in catalog.yaml either; cancel it (`runlane cancel r1`)" in text


def test_without_the_file_read_the_restart_is_conditional() -> None:
    text = repair_notice(KEPT, "catalog.yaml", in_file=None, known_live=False)
    assert "if the job was added to the catalog since, restart `runlane serve`" in text


def test_corrupt_params_say_to_cancel_and_other_codes_point_to_doctor() -> None:
    corrupt = replace(KEPT, error_code="corrupt_params", params=None, params_raw="{x")
    assert "cancel it (`runlane cancel r1`) and queue a new one" in repair_notice(
        corrupt, "catalog.yaml", in_file=True, known_live=True
    )
    other = replace(KEPT, error_code="odd_state", note="something odd")
    assert repair_notice(other, "c.yaml", in_file=True, known_live=False) == (
        "run r1 is kept for repair (odd_state: something odd); see `runlane doctor`; next try "
        "(2031-01-02T03:04:05Z)"
    )
