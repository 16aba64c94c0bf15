"""The API's request bodies and the OpenAPI description of its answers.

Answers are built by `runlane.service.views` (the field names of the run log and of `--json`)
and sent as they are; the response models here describe them for the spec (schemathesis checks
every answer against it), so a field added to a view must be added here too. Request bodies
forbid unknown fields: a typo is a 422 naming it, not a silently ignored option.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from runlane.api.inputs import EventText, Reason, StoredText
from runlane.core.runs import BASIC_LEFT_OUT, RunStatus


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunCreate(Body):
    """`POST /jobs/{job}/runs`: the run's params (checked against the job's allowlist) and,
    for a job with `acts: true`, `confirm` equal to the job's name."""

    params: dict[str, Any] = Field(default_factory=dict)
    confirm: StoredText | None = None


class ChainRunCreate(Body):
    """`POST /chains/{chain}/runs`: `confirm` equal to the chain's name when a step's job has
    `acts: true`."""

    confirm: str | None = None


class EventCreate(Body):
    """`POST /events`: the event's key, its data, and an id that makes emitting it again
    idempotent (default: a new one). `confirm: true` confirms listeners with `acts: true`."""

    key: EventText
    data: dict[str, Any] = Field(default_factory=dict)
    id: EventText | None = None
    confirm: bool = False


class PauseCreate(Body):
    """`POST /jobs/{job}/pause`: until a time (ISO-8601) or for a duration (`2h`); absent:
    until resumed."""

    until: StoredText | None = None
    reason: Reason | None = None


class View(BaseModel):
    """An answer: further fields may be added in later versions (clients ignore them)."""

    model_config = ConfigDict(extra="allow")


class RunView(View):
    """A run-log row (`runlane runs --json`): every column but the lease token."""

    id: str
    job: str
    status: RunStatus
    trigger: str
    dedupe_key: str
    attempt: int
    executor: str
    overlap: str
    params: dict[str, Any] | None
    params_raw: str | None = Field(None, description="only when `params` is null")
    queued_at: datetime
    requested_by: str | None
    parent_run_id: str | None
    chain_root_id: str | None
    event_id: str | None
    downstream: list[str] | None
    scheduled_for: datetime | None
    retry_of: str | None
    max_attempts: int
    deadline_seconds: float
    kill_grace_seconds: float
    external_id: str | None
    not_before: datetime | None
    queue_expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    deadline_at: datetime | None
    exit_code: int | None
    end_reason: str | None
    error_code: str | None
    note: str | None
    log_tail: str | None = Field(description="the saved tail of its output (up to 64 KiB)")
    traceparent: str | None
    cancel_requested_at: datetime | None
    lease_owner: str | None
    lease_generation: int
    lease_expires_at: datetime | None


# A run in the run list's basic view (`view=basic`): `RunView` without the fields whose size has
# no small bound (`core.runs.BASIC_LEFT_OUT`), made from RunView's own fields so the two agree.
_BASIC_FIELDS: dict[str, Any] = {
    name: (field.annotation, field)
    for name, field in RunView.model_fields.items()
    if name not in (*BASIC_LEFT_OUT, "params_raw")
}
RunBasicView = create_model(
    "RunBasicView",
    __base__=View,
    __doc__="A run as the run list's basic view has it: every field of a run but `params`, "
    "`note` and `log_tail`.",
    **_BASIC_FIELDS,
)


class RunPageView(View):
    items: list[RunView] | list[RunBasicView] = Field(
        description="each run whole (`view=full`) or without its params, note and log tail "
        "(`view=basic`)"
    )
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class StepStatusView(View):
    step: str
    on: str


class ChainStepView(View):
    step: str
    job: str
    after: list[StepStatusView]
    status: str
    end_reason: str | None
    run_id: str | None
    attempt: int | None


class ChainRunView(View):
    """A chain run with its steps in dependency order, each with its latest attempt."""

    id: str
    chain: str
    status: str
    trigger: str
    requested_by: str | None
    scheduled_for: datetime | None
    started_at: datetime | None
    deadline_at: datetime | None
    finished_at: datetime | None
    end_reason: str | None
    overrun: bool
    overrun_at: datetime | None
    steps: list[ChainStepView] = Field(default_factory=list)


class ChainRunPageView(View):
    items: list[ChainRunView]
    next_cursor: str | None


class ChainStepSpecView(View):
    step: str
    job: str
    after: list[StepStatusView]
    latest: str | None


class ChainView(View):
    chain: str
    description: str | None
    schedule: str | None
    timezone: str | None
    max_duration_seconds: float | None
    steps: list[ChainStepSpecView]


class ChainPageView(View):
    items: list[ChainView]
    next_cursor: str | None


class SlotView(View):
    utc: datetime
    local: str = Field(description="the slot in the schedule's zone, ISO-8601 with offset")


class ScheduleView(View):
    cron: str
    timezone: str
    next_slots: list[SlotView]


class JobView(View):
    """A job of the catalog (`runlane jobs --json`), with its params as a JSON Schema and its
    schedules' next slots."""

    job: str
    executor: str
    overlap: str
    max_attempts: int
    deadline_seconds: float
    acts: bool
    params: dict[str, str] = Field(description="the allowlist as the catalog writes it")
    params_schema: dict[str, Any] = Field(description="the allowlist as a JSON Schema")
    schedules: list[str]
    schedule_slots: list[ScheduleView]
    paused: bool
    paused_until: datetime | None
    pause_reason: str | None
    paused_by: str | None
    description: str | None
    last_run: RunView | None = None


class JobPageView(View):
    items: list[JobView]
    next_cursor: str | None


class PauseView(View):
    job: str
    paused: bool
    paused_until: datetime | None
    pause_reason: str | None
    paused_by: str | None


class ResumeView(View):
    job: str
    was_paused: bool


class ExplainView(View):
    job: str
    at: datetime
    slot: datetime | None
    verdict: str
    run_id: str | None
    lines: list[str]


class EventView(View):
    id: str
    key: str
    occurred_at: datetime
    new: bool


class EventRunView(View):
    job: str
    run_id: str
    started: bool = Field(description="true: the event started the run; false: it joined it")
    status: RunStatus
    end_reason: str | None


class EventEmittedView(View):
    event: EventView
    runs: list[EventRunView]


class LauncherView(View):
    launcher_id: str
    host: str
    pid: int
    version: str
    started_at: datetime | None
    beat_at: datetime | None
    last_seen_seconds: float | None
    stale: bool
    queue_depth: int | None
    running: dict[str, int] | None
    catalog_digest: str | None
    catalog_loaded_at: datetime | None
    catalog_jobs: list[str] | None
    catalog_path: str | None
    heartbeat_interval: float | None
    catalog_chains: list[str] | None
    log_dir: str | None
    bus_queue_depth: int | None
    bus_dlq_depth: int | None
    catalog_current: bool | None


class LauncherPageView(View):
    items: list[LauncherView]
    next_cursor: str | None


class ScheduleRowView(View):
    kind: Literal["job", "chain"]
    name: str
    cron: str
    tz: str
    slot: datetime
    local: str
    season: str | None
    fires: bool
    reason: str


class NoticeView(View):
    code: str
    message: str


class ScheduleTableView(View):
    start: datetime
    end: datetime
    items: list[ScheduleRowView]
    next_cursor: str | None
    notes: list[NoticeView]
