"""Everything a person can do with runlane, for every face (CLI, HTTP API, web UI, MCP).

Each operation is an async function that takes the context (`Runtime`: the open store, the
catalog, the settings), plain typed arguments and, for what writes, a `Requester` (who asks and
through which face), and returns a frozen dataclass, or raises a `RunlaneError` subclass with a
stable `code` (docs/errors.md). What a face should tell the person besides the result (no
launcher is running, the launchers run an older catalog) comes as `Notice`s in the result,
decided here once. Runs are accepted only through `service.accept`, never written another way.

By topic: `runs` (run now, list, show, cancel), `chains`, `events` (emit), `jobs` (list, show,
pause, resume, explain), `status` (status, launchers, doctor), `logs` (a run's output, followed,
or its tail), `schedule` (the schedule table), `tokens` (API tokens, authenticate), `sessions`
(the web UI's sessions, CSRF tokens, login links), `audit` (the audit log),
`idempotency` (Idempotency-Key replays); `arguments` and `lookup` check what requests carry.
"""

from __future__ import annotations

from runlane.service.accept import text_problem
from runlane.service.operations.arguments import Requester, check_limit
from runlane.service.operations.audit import AuditPage, audited, list_audit, record_audit
from runlane.service.operations.chains import (
    ChainInfo,
    ChainRunView,
    ChainStarted,
    ChainStepInfo,
    authorize_run_chain,
    list_chain_runs,
    list_chains,
    run_chain,
    show_chain,
    show_chain_run,
)
from runlane.service.operations.events import (
    EventEmitted,
    EventListener,
    RecentEvent,
    emit,
    event_listeners,
    list_events,
    parse_event_data,
)
from runlane.service.operations.idempotency import (
    Replayable,
    idempotency_dedupe_key,
    idempotent,
    request_fingerprint,
)
from runlane.service.operations.jobs import (
    JobInfo,
    JobPage,
    JobSchedule,
    Resumed,
    explain,
    job_schedules,
    list_jobs,
    list_jobs_page,
    pause_job,
    resume_job,
    show_job,
)
from runlane.service.operations.logs import (
    LogIncomplete,
    LogTail,
    OutputBytes,
    OutputItem,
    OutputSkipped,
    OutputText,
    Retrying,
    RunEnded,
    follow_run,
    run_output,
    run_output_tail,
)
from runlane.service.operations.lookup import resolve_chain_run, resolve_run
from runlane.service.operations.notices import Notice
from runlane.service.operations.runs import (
    RUN_LIST_VIEWS,
    CancelledChainRun,
    CancelledRun,
    RunItemsPage,
    RunPage,
    RunQueued,
    attempt_chain,
    authorize_cancel,
    authorize_run_job,
    cancel,
    list_run_items_page,
    list_runs,
    list_runs_page,
    parse_status,
    parse_trigger,
    run_job,
    show_run,
)
from runlane.service.operations.schedule import ScheduleTable, schedule_table
from runlane.service.operations.status import (
    DoctorReport,
    LauncherState,
    StatusReport,
    doctor,
    list_launchers,
    status,
)
from runlane.service.operations.tokens import (
    TokenCreated,
    TokenInfo,
    authenticate,
    create_token,
    list_tokens,
    revoke_token,
)

__all__ = [
    "RUN_LIST_VIEWS",
    "AuditPage",
    "CancelledChainRun",
    "CancelledRun",
    "ChainInfo",
    "ChainRunView",
    "ChainStarted",
    "ChainStepInfo",
    "DoctorReport",
    "EventEmitted",
    "EventListener",
    "JobInfo",
    "JobPage",
    "JobSchedule",
    "LauncherState",
    "LogIncomplete",
    "LogTail",
    "Notice",
    "OutputBytes",
    "OutputItem",
    "OutputSkipped",
    "OutputText",
    "RecentEvent",
    "Replayable",
    "Requester",
    "Resumed",
    "Retrying",
    "RunEnded",
    "RunItemsPage",
    "RunPage",
    "RunQueued",
    "ScheduleTable",
    "StatusReport",
    "TokenCreated",
    "TokenInfo",
    "attempt_chain",
    "audited",
    "authenticate",
    "authorize_cancel",
    "authorize_run_chain",
    "authorize_run_job",
    "cancel",
    "check_limit",
    "create_token",
    "doctor",
    "emit",
    "event_listeners",
    "explain",
    "follow_run",
    "idempotency_dedupe_key",
    "idempotent",
    "job_schedules",
    "list_audit",
    "list_chain_runs",
    "list_chains",
    "list_events",
    "list_jobs",
    "list_jobs_page",
    "list_launchers",
    "list_run_items_page",
    "list_runs",
    "list_runs_page",
    "list_tokens",
    "parse_event_data",
    "parse_status",
    "parse_trigger",
    "pause_job",
    "record_audit",
    "request_fingerprint",
    "resolve_chain_run",
    "resolve_run",
    "resume_job",
    "revoke_token",
    "run_chain",
    "run_job",
    "run_output",
    "run_output_tail",
    "schedule_table",
    "show_chain",
    "show_chain_run",
    "show_job",
    "show_run",
    "status",
    "text_problem",
]
