"""What a run's process sees in its environment."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from runlane.catalog import parse_catalog_text
from runlane.core.runs import Run, RunStatus
from runlane.service.launcher import build_env

CATALOG = """
version: 1
defaults: {executor: inline}
jobs:
  job:
    command: ["true"]
    params: {week: int?, dry_run: bool?, name: str?}
    env: {FROM_JOB: "1"}
"""


def run(**kw: object) -> Run:
    base = Run(
        id="r1",
        job="job",
        status=RunStatus.RUNNING,
        trigger="cli",
        dedupe_key="k",
        attempt=2,
        executor="inline",
        overlap="allow",
        params={"week": 7, "dry_run": True, "name": None},
        params_raw="{}",
        queued_at=datetime(2026, 1, 1, tzinfo=UTC),
        parent_run_id="p1",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_env_carries_the_run_and_its_params() -> None:
    job = parse_catalog_text(CATALOG).resolve("job")
    env = build_env(run(), "postgresql://u:secret@db/x", job)
    assert env["RUN_ID"] == "r1"
    assert env["RUN_TRIGGER"] == "cli"
    assert env["RUN_PARENT_ID"] == "p1"
    assert env["RUNLANE_ATTEMPT"] == "2"
    assert env["RUNLANE_PARAMS"] == '{"dry_run":true,"name":null,"week":7}'
    assert env["RUNLANE_PARAM_WEEK"] == "7"
    assert env["RUNLANE_PARAM_DRY_RUN"] == "true"
    assert "RUNLANE_PARAM_NAME" not in env
    assert env["FROM_JOB"] == "1"
    assert env["RUNLANE_DATABASE_URL"] == "postgresql://u:secret@db/x"


def test_the_database_url_never_goes_into_a_pod_or_slurm_spec() -> None:
    job = parse_catalog_text(CATALOG).resolve("job")
    for executor in ("pod", "slurm"):
        env = build_env(run(executor=executor), "postgresql://u:secret@db/x", job)
        assert "RUNLANE_DATABASE_URL" not in env
        assert not any("secret" in v for v in env.values())
