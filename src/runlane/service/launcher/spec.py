"""What a run's execution is given: its environment and its `ExecutionSpec`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from runlane.catalog import ResolvedJob
from runlane.core.runs import Run
from runlane.ports import ExecutionSpec

# RUNLANE_PARAMS: one encoder for every run (json.dumps with options builds a new one per call).
_params_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


@dataclass(frozen=True, slots=True)
class JobPlan:
    """A resolved job and what every run of it shares, worked out once per launcher."""

    job: ResolvedJob
    env: Mapping[str, str]
    profile: Mapping[str, Any]

    @classmethod
    def of(cls, job: ResolvedJob) -> JobPlan:
        profile = job.profile_spec.model_dump() if job.profile_spec is not None else {}
        return cls(job, MappingProxyType(job_env(job)), MappingProxyType(profile))


def job_env(job: ResolvedJob) -> dict[str, str]:
    """The environment a job gives every run of it: its profile's, then its own."""
    env: dict[str, str] = {}
    if job.profile_spec is not None:
        env.update(job.profile_spec.env or {})
    env.update(job.env)
    return env


def build_env(
    run: Run, database_url: str, job: ResolvedJob, *, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a run's process sees on top of the launcher's (DESIGN.md "Inside a run").
    `base` is `job_env(job)`, when the caller keeps it per job.

    `RUNLANE_DATABASE_URL` (for the SDK's child rows) goes only to inline runs, which share the
    launcher's machine and environment anyway: in a pod or Slurm job spec it would expose the
    database password to whoever can read those objects; give such jobs the URL through a
    secret (profile `secrets`) instead."""
    params = run.params or {}
    env = dict(job_env(job) if base is None else base)
    env["RUN_ID"] = run.id
    env["RUN_TRIGGER"] = run.trigger
    env["RUN_PARENT_ID"] = run.parent_run_id or ""
    env["RUNLANE_JOB"] = run.job
    env["RUNLANE_ATTEMPT"] = str(run.attempt)
    env["RUNLANE_PARAMS"] = _params_json(params) if params else "{}"
    if run.traceparent is not None:
        # The OpenTelemetry environment carrier: a child process that extracts it joins the
        # caller's trace. Only a run that has one gets it (no TRACEPARENT beats an empty one).
        env["TRACEPARENT"] = run.traceparent
    if run.executor == "inline":
        env["RUNLANE_DATABASE_URL"] = database_url
    for name, value in params.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            continue
        else:
            text = str(value)
        env[f"RUNLANE_PARAM_{name.upper()}"] = text
    return env


def execution_spec(run: Run, plan: JobPlan, db_now: datetime, database_url: str) -> ExecutionSpec:
    """What the executor is given for `run`; its deadline counts from `db_now`."""
    job = plan.job
    remaining = job.deadline_seconds
    if run.deadline_at is not None:
        remaining = (run.deadline_at - db_now).total_seconds()
    return ExecutionSpec(
        run_id=run.id,
        job=run.job,
        attempt=run.attempt,
        trigger=run.trigger,
        command=list(job.command),
        params=run.params or {},
        env=build_env(run, database_url, job, base=plan.env),
        deadline_seconds=remaining,
        kill_grace_seconds=run.kill_grace_seconds,
        parent_run_id=run.parent_run_id,
        # Shared by every run of the job, read-only: executors build what they send from it.
        profile=plan.profile,
        log_max_bytes=job.log_max_bytes,
    )
