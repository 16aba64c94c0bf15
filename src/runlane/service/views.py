"""The JSON shape of what operations return, shared by every face (CLI `--json`, HTTP API, web
UI, MCP): the run log's column names, UTC ISO-8601 times with a `Z`, enums by value. A field
is named here once, so the faces cannot drift apart.

Light on purpose (no catalog, no store): the CLI imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from runlane.core.records import AuditEntry, ChainRun
from runlane.core.runs import Run
from runlane.core.times import iso as iso

if TYPE_CHECKING:
    from runlane.core.records import Override
    from runlane.core.schedule import SlotRow
    from runlane.service.chains import StepView
    from runlane.service.operations.events import EventEmitted
    from runlane.service.operations.jobs import JobInfo, JobSchedule
    from runlane.service.operations.logs import LogTail
    from runlane.service.operations.status import LauncherState, StatusReport
    from runlane.service.operations.tokens import TokenInfo
    from runlane.service.scheduler import Explanation

# The lease token is a secret of the launcher holding it: never shown. `params_raw` is shown
# only when the params could not be read (see `run_dict`).
HIDDEN = frozenset({"lease_token", "params_raw"})


# Values JSON takes as they are. Exact types: a StrEnum (a run's status) is a str subclass and
# must go through `jsonable` to be shown by value.
_AS_IS = frozenset({str, int, float, bool, type(None)})


def jsonable(value: Any) -> Any:
    """`value` with times as `iso`, enums by value, mappings and sequences converted inside."""
    if type(value) in _AS_IS:
        return value
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return value


# The columns `run_dict` shows, in the row's order; read once, not per run (a page of the API's
# run list converts 50 to 500 runs per request).
_RUN_FIELDS = tuple(f.name for f in fields(Run) if f.name not in HIDDEN)


def run_dict(run: Run) -> dict[str, Any]:
    """A run-log row: every column but the lease token (`params_raw` only when `params` is
    null: the stored text that does not parse). Plain values skip `jsonable`: about 3x faster,
    which is most of the time of an API page of runs."""
    data: dict[str, Any] = {}
    for name in _RUN_FIELDS:
        value = getattr(run, name)
        data[name] = value if type(value) in _AS_IS else jsonable(value)
    if run.params is None:
        data["params_raw"] = run.params_raw
    return data


def chain_run_dict(run: ChainRun, steps: Sequence[StepView] | None = None) -> dict[str, Any]:
    """A chain run (and, when given, its steps with their statuses)."""
    data: dict[str, Any] = {
        "id": run.id,
        "chain": run.chain,
        "status": run.status,
        "trigger": run.trigger,
        "requested_by": run.requested_by,
        "scheduled_for": iso(run.scheduled_for),
        "started_at": iso(run.started_at),
        "deadline_at": iso(run.deadline_at),
        "finished_at": iso(run.finished_at),
        "end_reason": run.end_reason,
        "overrun": run.overrun,
        "overrun_at": iso(run.overrun_at),
    }
    if steps is not None:
        data["steps"] = [
            {
                "step": s.step,
                "job": s.job,
                "after": [{"step": p, "on": on} for p, on in s.after],
                "status": s.status,
                "end_reason": s.end_reason,
                "run_id": s.run_id,
                "attempt": s.attempt,
            }
            for s in steps
        ]
    return data


def job_dict(info: JobInfo) -> dict[str, Any]:
    """A job of the catalog with its pause state (a row of `runlane jobs --json`)."""
    pause = info.pause
    return {
        "job": info.name,
        "executor": info.executor,
        "overlap": info.overlap,
        "max_attempts": info.max_attempts,
        "deadline_seconds": info.deadline_seconds,
        "acts": info.acts,
        "params": {k: str(v) for k, v in info.params.items()},
        "schedules": list(info.schedules),
        "paused": pause is not None,
        "paused_until": iso(pause.paused_until) if pause else None,
        "pause_reason": pause.reason if pause else None,
        "paused_by": pause.created_by if pause else None,
        "description": info.description,
    }


def job_view(
    info: JobInfo, schedules: Sequence[JobSchedule], *, with_last_run: bool
) -> dict[str, Any]:
    """A job as the API and MCP show it: `job_dict`, its params as a JSON Schema, each
    schedule's next slots (UTC and local) and, from `show_job`, its latest run."""
    from runlane.catalog.params import params_json_schema  # the catalog: not at start-up

    data = job_dict(info)
    data["params_schema"] = params_json_schema(info.params)
    data["schedule_slots"] = [
        {
            "cron": s.cron,
            "timezone": s.timezone,
            "next_slots": [
                {"utc": iso(utc), "local": local.isoformat()}
                for utc, local in zip(s.next_slots, s.local_slots, strict=True)
            ],
        }
        for s in schedules
    ]
    if with_last_run:
        data["last_run"] = None if info.last_run is None else run_dict(info.last_run)
    return data


def pause_dict(job: str, override: Override) -> dict[str, Any]:
    """A job's pause as `pause_job` set it."""
    return {
        "job": job,
        "paused": True,
        "paused_until": iso(override.paused_until),
        "pause_reason": override.reason,
        "paused_by": override.created_by,
    }


def explanation_dict(found: Explanation) -> dict[str, Any]:
    """Why a job's (or chain's) latest slot did what it did (`explain`)."""
    return {
        "job": found.job,
        "at": iso(found.at),
        "slot": iso(found.slot),
        "verdict": found.verdict,
        "run_id": found.run_id,
        "lines": list(found.lines),
    }


def log_tail_dict(tail: LogTail) -> dict[str, Any]:
    """The end of a run's output (`run_output_tail`): the text, where it is in the log, how
    many bytes before it were left out, and why there is none (`notice`)."""
    return {
        "run_id": tail.run_id,
        "status": tail.status.value,
        "text": tail.text,
        "start_offset": tail.start_offset,
        "end_offset": tail.end_offset,
        "cut_bytes": tail.cut_bytes,
        "line_open": tail.line_open,
        "source": tail.source,
        "incomplete": None if tail.incomplete is None else tail.incomplete.marker,
        "saved_tail": None if tail.incomplete is None else tail.incomplete.tail,
        "notice": None if tail.notice is None else tail.notice.message,
    }


def launcher_dict(state: LauncherState) -> dict[str, Any]:
    """A launcher's heartbeat and what it says about the launcher now."""
    h = state.heartbeat
    return {
        "launcher_id": h.launcher_id,
        "host": h.host,
        "pid": h.pid,
        "version": h.version,
        "started_at": iso(h.started_at),
        "beat_at": iso(h.beat_at),
        "last_seen_seconds": state.last_seen_seconds,
        "stale": state.stale,
        # A stale launcher's last counts are history, not the present: not shown.
        "queue_depth": state.queue_depth,
        "running": None if state.running is None else dict(state.running),
        "catalog_digest": h.catalog_digest,
        "catalog_loaded_at": iso(h.catalog_loaded_at),
        "catalog_jobs": None if h.catalog_jobs is None else list(h.catalog_jobs),
        "catalog_path": h.catalog_path,
        "heartbeat_interval": h.heartbeat_interval,
        "catalog_chains": None if h.catalog_chains is None else list(h.catalog_chains),
        "log_dir": h.log_dir,
        "bus_queue_depth": state.bus_queue_depth,
        "bus_dlq_depth": state.bus_dlq_depth,
        # True: runs the file as it is now; False: the file changed since it loaded it;
        # null: cannot tell (the file does not load, or no digest reported).
        "catalog_current": state.catalog_current,
    }


def status_dict(report: StatusReport) -> dict[str, Any]:
    """`status`: queue depth, running count, what is stuck, the catalog, every launcher."""
    return {
        "now": iso(report.now),
        "queued": report.queued,
        "running": report.running,
        "stuck": [
            {"id": s.run_id, "job": s.job, "status": s.status, "why": s.why} for s in report.stuck
        ],
        "catalog": {
            "path": report.catalog_path,
            "catalog_digest": report.catalog_digest,
            "error": report.catalog_error,
        },
        "launchers": [launcher_dict(state) for state in report.launchers],
        # The broker's run-command queues (RabbitMQ bus) as a live launcher's heartbeat last
        # recorded them; null on the database bus.
        "bus_queues": (
            None
            if (q := report.bus_queues) is None
            else {
                "job_runs": q.job_runs,
                "job_runs_dlq": q.job_runs_dlq,
                "launcher_id": q.launcher_id,
                "seen_seconds": q.seen_seconds,
            }
        ),
    }


def token_dict(info: TokenInfo) -> dict[str, Any]:
    """An API token as `runlane token list --json` and the API show it: never its secret or
    hash; `prefix` is the secret's first characters, to match a leaked secret to its token."""
    return {
        "name": info.name,
        "role": info.role.value,
        "jobs": list(info.jobs),
        "prefix": info.prefix,
        "created_at": iso(info.created_at),
        "created_by": info.created_by,
        "expires_at": iso(info.expires_at),
        "revoked_at": iso(info.revoked_at),
        "last_used_at": iso(info.last_used_at),
    }


def audit_dict(entry: AuditEntry) -> dict[str, Any]:
    """An audit log entry (a row of `runlane audit --json`)."""
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "outcome": entry.outcome,
        "remote": entry.remote,
        "detail": entry.detail,
    }


def slot_dict(row: SlotRow) -> dict[str, Any]:
    """A slot of the schedule table (a row of `runlane schedule --json`): UTC and local time,
    season, and whether it would fire."""
    return {
        "kind": row.spec.kind,
        "name": row.spec.target,
        "cron": row.spec.cron,
        "tz": row.spec.tz,
        "slot": iso(row.slot),
        "local": row.local.isoformat(),
        "season": row.season,
        "fires": row.fires,
        "reason": row.reason,
    }


def emitted_dict(emitted: EventEmitted) -> dict[str, Any]:
    """An event and the runs it started or joined (`runlane emit --json`)."""
    return {
        "event": {
            "id": emitted.event.id,
            "key": emitted.event.key,
            "occurred_at": iso(emitted.event.occurred_at),
            "new": emitted.created,
        },
        "runs": [
            {
                "job": link.job,
                "run_id": link.run_id,
                "started": link.started,
                "status": result.run.status.value,
                "end_reason": result.run.end_reason,
            }
            for link, result in zip(emitted.links, emitted.runs, strict=True)
        ],
    }
