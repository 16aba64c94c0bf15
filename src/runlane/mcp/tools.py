"""The MCP tools: each one calls `runlane.service.operations` (the validation, roles, `acts`
confirmation, overlap, limits and error codes every face shares) and answers with the JSON the
HTTP API answers with (`runlane.service.views`) as structured content.

A refusal is a tool error (`isError`) whose structured content is `{"code", "message"}`: the
stable code of docs/errors.md and one sentence a person can act on, never a traceback. Who asks
comes from the transport (`Caller`): the token of `RUNLANE_TOKEN` on stdio, the bearer token of
the request over HTTP. Without a token (stdio only) the read tools work and every write is refused
as `unauthenticated`, naming what to set.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field

from runlane import __version__
from runlane.core.access import Role
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import ConfirmationRequired, InvalidArgument, RunlaneError, Unauthenticated
from runlane.service import operations
from runlane.service.operations import CancelledRun, Notice, Requester
from runlane.service.runtime import Runtime
from runlane.service.views import (
    chain_run_dict,
    emitted_dict,
    explanation_dict,
    job_view,
    jsonable,
    log_tail_dict,
    pause_dict,
    run_dict,
)

T = TypeVar("T")

MAX_RUNS_PAGE = 100  # a page of `list_runs` holds at most this many runs
DEFAULT_RUNS_PAGE = 20
LAST_RUNS = 5  # `describe_job` shows this many of the job's latest runs
# `get_run_logs`: a tail an assistant can read, never megabytes.
DEFAULT_LOG_LINES = 200
MAX_LOG_LINES = 2000
DEFAULT_LOG_BYTES = 16 * 1024
MAX_LOG_BYTES = 64 * 1024
NO_TOKEN = (
    "this MCP server has no token, so it can only read: set RUNLANE_TOKEN in its environment "  # noqa: S105 - a sentence
    "to a token that may write (`runlane token create NAME --role operator`) to run, cancel, "
    "pause, resume or emit"
)
# The first protocol revision that carries elicitation in the tool result (`input_required`)
# rather than as a request of the server to the client during the call.
_INPUT_REQUIRED_VERSION = "2026-07-28"

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
# Starting or stopping work, or silencing a schedule, changes the world: destructive.
ACT = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)
RESUME = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

JobArg = Annotated[str, Field(description="The job's name in the catalog")]
RunIdArg = Annotated[
    str, Field(description="A run's id, or a unique prefix of it (at least 6 characters)")
]
ConfirmArg = Annotated[
    str | None,
    Field(
        description="For a job with `acts: true`: its name, typed to confirm that it may act on "
        "the outside world. Ask the person first; without it the job is not started."
    ),
]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls a tool: `requester` (None: no token, reads only) and where from (`remote`:
    `stdio`, or the HTTP peer's address), recorded in the audit log with every write."""

    requester: Requester | None
    remote: str | None


CallerOf = Callable[[Context], Caller]
RuntimeOf = Callable[[], Runtime]


class Confirmation(BaseModel):
    """What a client that supports elicitation asks the person before an `acts` job runs."""

    confirm: bool = Field(description="Run it: it acts on the outside world")


# What a tool gets from its confirmation resolver: the person's answer, or None (not asked).
Asked = ElicitationResult[Confirmation]


def ok(data: Mapping[str, Any], notices: tuple[Notice, ...] = ()) -> CallToolResult:
    """A tool's result: `data` as structured content and as JSON text (for clients that read
    text only), and each notice (no launcher is running, …) as a line of its own."""
    body = dict(data)
    content = [TextContent(type="text", text=json.dumps(body, ensure_ascii=False))]
    content += [TextContent(type="text", text=f"{n.level}: {n.message}") for n in notices]
    return CallToolResult(content=content, structured_content=body)


def refused(code: str, message: str, **extra: Any) -> CallToolResult:
    """A tool error: the stable code and the sentence, as text and as structured content."""
    data = {"code": code, "message": message, **extra}
    return CallToolResult(
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structured_content=data,
        is_error=True,
    )


def error_result(exc: RunlaneError) -> CallToolResult:
    extra: dict[str, Any] = {}
    if (active := getattr(exc, "active_run_id", None)) is not None:
        extra["active_run_id"] = active
    return refused(exc.code, exc.message, **extra)


async def coded_errors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: give the SDK's own tool errors (arguments that do not match the input
    schema, an unknown tool, a crash) a code, as runlane's refusals have: `invalid_argument`
    with pydantic's lines (not its links), or `error` with no detail for a crash."""
    result = await call_next(ctx)
    if ctx.method != "tools/call" or not isinstance(result, dict):
        return result
    if not result.get("isError") or result.get("structuredContent") is not None:
        return result
    content = result.get("content") or []
    text = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    if "validation error" in text or text.startswith("Unknown tool"):
        lines = [line.strip() for line in text.splitlines()]
        kept = (line for line in lines if line and not line.startswith("For further information"))
        coded = refused("invalid_argument", "; ".join(kept))
    else:
        coded = refused("error", text or "the tool failed")
    wire = coded.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {**result, "content": wire["content"], "structuredContent": wire["structuredContent"]}


def can_elicit(ctx: Context) -> bool:
    """Whether the client can be asked (form elicitation) during this call."""
    try:
        capabilities = ctx.client_capabilities
        request = ctx.request_context
    except ValueError:  # no request (a direct call): nobody to ask
        return False
    found = capabilities.elicitation if capabilities is not None else None
    if found is None or (found.form is None and found.url is not None):
        return False
    if is_version_at_least(request.protocol_version, _INPUT_REQUIRED_VERSION):
        return True  # the question rides the result: no channel back is needed
    return request.session.can_send_request


def confirmed_by(asked: Asked, given: str | None, name: str) -> str | CallToolResult | None:
    """The `confirm` to pass on: the person's yes to the question (the name), what the caller
    gave when nobody was asked, or a refusal when the person said no."""
    if isinstance(asked, AcceptedElicitation):
        if asked.data is None:  # not asked
            return given
        if asked.data.confirm:
            return name
    return refused(
        "confirmation_required",
        f"{name!r} acts on the outside world (acts: true) and the person did not confirm: "
        "nothing was started",
    )


class RunlaneServer(MCPServer[Any]):
    """The SDK's server with what runlane's tools and their resolvers serve from:
    `runtime_of()`, the open runtime, and `caller_of(ctx)`, who calls (the transport decides)."""

    def __init__(self, runtime_of: RuntimeOf, caller_of: CallerOf, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runtime_of = runtime_of
        self.caller_of = caller_of


def _server(ctx: Context) -> RunlaneServer:
    server = ctx.mcp_server
    assert isinstance(server, RunlaneServer)  # only build_server's tools get here
    return server


def build_server(runtime_of: RuntimeOf, caller_of: CallerOf) -> RunlaneServer:
    """The MCP server of runlane's tools. `runtime_of()`: the open runtime to serve from;
    `caller_of(ctx)`: who calls (the transport decides)."""
    server = RunlaneServer(
        runtime_of,
        caller_of,
        name="runlane",
        title="runlane",
        version=__version__,
        instructions=(
            "runlane runs the jobs and chains of a catalog. Read with list_jobs, describe_job, "
            "list_runs, get_run, get_run_logs, get_chain_run and explain. A job or chain with "
            "`acts: true` acts on the outside world: ask the person before passing `confirm`."
        ),
        log_level="WARNING",
        middleware=[coded_errors],
    )

    def reader(ctx: Context) -> Runtime:
        caller = caller_of(ctx)
        if caller.requester is not None:
            caller.requester.require(Role.VIEWER, action="read")
        return runtime_of()

    async def write(
        ctx: Context,
        action: str,
        target: str,
        do: Callable[[Runtime, Requester, str | None], Awaitable[CallToolResult]],
        *,
        confirming: tuple[Asked, str | None] | None = None,
        unconfirmed: Callable[[Runtime], CallToolResult] | None = None,
    ) -> CallToolResult:
        """A write: refused without a token; with `confirming` (the person's answer, the
        `confirm` given), refused when the person said no; then `do(rt, requester, confirm)`
        recorded in the audit log as `action` on `target` (refusals too). `unconfirmed(rt)`:
        the answer to `confirmation_required`, saying what would run and how to confirm."""
        caller = caller_of(ctx)
        if caller.requester is None:
            return error_result(Unauthenticated(NO_TOKEN))
        requester, rt = caller.requester, runtime_of()
        confirm = None
        if confirming is not None:
            answer = confirmed_by(*confirming, target)
            if isinstance(answer, CallToolResult):
                return answer
            confirm = answer
        try:
            return await operations.audited(
                rt,
                requester,
                action=action,
                target=target,
                remote=caller.remote,
                call=lambda: do(rt, requester, confirm),
            )
        except ConfirmationRequired as exc:
            return unconfirmed(rt) if unconfirmed is not None else error_result(exc)
        except RunlaneError as exc:
            return error_result(exc)

    async def read(
        ctx: Context,
        fetch: Callable[[Runtime], Awaitable[T]],
        show: Callable[[T], Mapping[str, Any]],
    ) -> CallToolResult:
        """A read: `show(await fetch(rt))` as the result, or the refusal."""
        try:
            found = await fetch(reader(ctx))
        except RunlaneError as exc:
            return error_result(exc)
        return ok(show(found))

    # --- reads ------------------------------------------------------------------------------

    @server.tool(annotations=READ)
    async def list_jobs(ctx: Context) -> CallToolResult:
        """Every job of the catalog: executor, overlap, limits, `acts`, params (as a JSON
        Schema), schedules with their next slots (UTC and the schedule's zone), pause state."""
        try:
            rt = reader(ctx)
            infos = await operations.list_jobs(rt)
            schedules = await operations.job_schedules(rt, [i.name for i in infos if i.schedules])
        except RunlaneError as exc:
            return error_result(exc)
        items = [job_view(i, schedules.get(i.name, ()), with_last_run=False) for i in infos]
        return ok({"items": items, "next_cursor": None})

    @server.tool(annotations=READ)
    async def describe_job(job: JobArg, ctx: Context) -> CallToolResult:
        """One job: its params as a JSON Schema, its schedules with their next slots in UTC and
        in their zone, its pause or snooze, its latest runs (`last_runs`, newest first, as
        `list_runs` has them: without params, note and saved log tail)."""
        try:
            rt = reader(ctx)
            info = await operations.show_job(rt, job)
            schedules = await operations.job_schedules(rt, [info.name]) if info.schedules else {}
            last = await operations.list_run_items_page(
                rt, job=info.name, limit=LAST_RUNS, view="basic"
            )
        except RunlaneError as exc:
            return error_result(exc)
        data = job_view(info, schedules.get(info.name, ()), with_last_run=True)
        data["last_runs"] = jsonable(last.items)
        return ok(data)

    @server.tool(annotations=READ)
    async def list_runs(
        ctx: Context,
        job: Annotated[str | None, Field(description="Only this job's runs")] = None,
        status: Annotated[RunStatus | None, Field(description="Only runs in this status")] = None,
        trigger: Annotated[Trigger | None, Field(description="Only runs started so")] = None,
        requested_by: Annotated[str | None, Field(description="Only runs asked for by")] = None,
        chain_root_id: Annotated[str | None, Field(description="Only this chain run's")] = None,
        since: Annotated[
            str | None, Field(description="Queued at or after: ISO-8601, now, now-1d")
        ] = None,
        until: Annotated[str | None, Field(description="Queued before: ISO-8601, now")] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_RUNS_PAGE, description="Runs on the page (1 to 100)")
        ] = DEFAULT_RUNS_PAGE,
        cursor: Annotated[str | None, Field(description="`next_cursor` of the page before")] = None,
    ) -> CallToolResult:
        """The runs newest first, filtered as the API's `GET /runs`; a page of at most 100.
        `next_cursor` (null on the last page) fetches the next one. Each run without its
        params, note and saved log tail (up to 64 KiB a run): `get_run` and `get_run_logs`
        have those."""
        try:
            if not 1 <= limit <= MAX_RUNS_PAGE:
                raise InvalidArgument(f"limit {limit}: expected a whole number from 1 to 100")
            page = await operations.list_run_items_page(
                reader(ctx),
                job=job,
                status=status,
                trigger=trigger,
                requested_by=requested_by,
                chain_root_id=chain_root_id,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
                view="basic",
            )
        except RunlaneError as exc:
            return error_result(exc)
        return ok({"items": jsonable(page.items), "next_cursor": page.next_cursor})

    @server.tool(annotations=READ)
    async def get_run(run_id: RunIdArg, ctx: Context) -> CallToolResult:
        """One run by its id or a unique prefix: status, times, exit code, end reason, error,
        params, trigger and who asked."""
        return await read(ctx, lambda rt: operations.show_run(rt, run_id), run_dict)

    @server.tool(annotations=READ)
    async def get_run_logs(
        run_id: RunIdArg,
        ctx: Context,
        lines: Annotated[
            int, Field(ge=1, le=MAX_LOG_LINES, description="The last N lines (1 to 2000)")
        ] = DEFAULT_LOG_LINES,
        max_bytes: Annotated[
            int,
            Field(ge=1, le=MAX_LOG_BYTES, description="At most this many bytes of them (to 65536)"),
        ] = DEFAULT_LOG_BYTES,
    ) -> CallToolResult:
        """The end of a run's output: its last LINES lines, at most MAX_BYTES, read from the
        log's end. `cut_bytes` says how much output comes before the text (left out);
        `start_offset`/`end_offset` are the text's place in the log."""
        try:
            tail = await operations.run_output_tail(
                reader(ctx), run_id, lines=lines, max_bytes=max_bytes
            )
        except RunlaneError as exc:
            return error_result(exc)
        data = log_tail_dict(tail)
        if data["saved_tail"] is not None:  # saved with the run: bounded there, and here too
            data["saved_tail"] = _last_lines(data["saved_tail"], lines, max_bytes)
        return ok(data, () if tail.notice is None else (tail.notice,))

    @server.tool(annotations=READ)
    async def get_chain_run(
        chain_run_id: Annotated[
            str, Field(description="A chain run's id, or a unique prefix (at least 6 characters)")
        ],
        ctx: Context,
    ) -> CallToolResult:
        """One chain run with its steps, each with its status and run."""
        return await read(
            ctx,
            lambda rt: operations.show_chain_run(rt, chain_run_id),
            lambda view: chain_run_dict(view.run, view.steps),
        )

    @server.tool(annotations=READ)
    async def explain(
        job: Annotated[str, Field(description="A job's (or a chain's) name")],
        ctx: Context,
        at: Annotated[
            str | None, Field(description="The time asked about: ISO-8601, now, now-2h")
        ] = None,
    ) -> CallToolResult:
        """Why JOB did or did not run at AT (default now): its latest slot at or before AT
        fired, was skipped, deduplicated, paused, missed or out of season, and why."""
        return await read(ctx, lambda rt: operations.explain(rt, job, at=at), explanation_dict)

    # --- writes -----------------------------------------------------------------------------

    @server.tool(annotations=ACT)
    async def run_job(
        job: JobArg,
        ctx: Context,
        asked: Annotated[Asked, Resolve(ask_run_job)],
        params: Annotated[
            dict[str, Any] | None,
            Field(description="The job's params by name (describe_job: params_schema)"),
        ] = None,
        confirm: ConfirmArg = None,
    ) -> CallToolResult:
        """Queue a run of JOB now (trigger `mcp`, requested by the token's name): the run as
        `get_run` shows it. A job with `acts: true` runs only with `confirm` equal to its name
        (a client that supports elicitation asks the person instead)."""

        async def do(rt: Runtime, requester: Requester, confirm: str | None) -> CallToolResult:
            queued = await operations.run_job(
                rt, job, requester=requester, params=params, confirm=confirm
            )
            return ok(run_dict(queued.run), queued.warnings)

        return await write(
            ctx,
            "run_job",
            job,
            do,
            confirming=(asked, confirm),
            unconfirmed=lambda rt: _confirm_job(rt, job, params),
        )

    @server.tool(annotations=ACT)
    async def run_chain(
        chain: Annotated[str, Field(description="The chain's name in the catalog")],
        ctx: Context,
        asked: Annotated[Asked, Resolve(ask_run_chain)],
        confirm: Annotated[
            str | None,
            Field(
                description="For a chain with a step whose job has `acts: true`: the chain's "
                "name, typed to confirm. Ask the person first."
            ),
        ] = None,
    ) -> CallToolResult:
        """Start a run of CHAIN now (its first steps are queued): the chain run with its
        steps. A chain with an `acts: true` step runs only with `confirm` equal to its name."""

        async def do(rt: Runtime, requester: Requester, confirm: str | None) -> CallToolResult:
            started = await operations.run_chain(rt, chain, requester=requester, confirm=confirm)
            return ok(chain_run_dict(started.view.run, started.view.steps), started.warnings)

        def unconfirmed(rt: Runtime) -> CallToolResult:
            return refused(
                "confirmation_required",
                f"chain {chain!r} runs jobs that act on the outside world (acts: true): "
                f"{', '.join(_acting_steps(rt, chain))}; nothing was started. To run it, ask "
                f"the person, then call run_chain again with confirm: {chain!r}",
            )

        return await write(
            ctx, "run_chain", chain, do, confirming=(asked, confirm), unconfirmed=unconfirmed
        )

    @server.tool(annotations=ACT)
    async def cancel_run(run_id: RunIdArg, ctx: Context) -> CallToolResult:
        """Cancel a queued run (at once) or a running one (its launcher stops it): the run as
        it is now. For a chain run's id, end the chain run with its unfinished steps."""

        async def do(rt: Runtime, requester: Requester, _confirm: str | None) -> CallToolResult:
            done = await operations.cancel(rt, run_id, requester=requester)
            if isinstance(done, CancelledRun):
                return ok(run_dict(done.run))
            view = await operations.show_chain_run(rt, done.chain_run.id)
            return ok(chain_run_dict(view.run, view.steps))

        return await write(ctx, "cancel", run_id, do)

    @server.tool(annotations=ACT)
    async def pause_job(
        job: JobArg,
        ctx: Context,
        until: Annotated[
            str | None,
            Field(
                description="Snooze until: a duration (2h) or an ISO-8601 time; "
                "leave out to pause until resume_job"
            ),
        ] = None,
        reason: Annotated[
            str | None, Field(description="Why, shown with the job (at most 500 characters)")
        ] = None,
    ) -> CallToolResult:
        """Pause JOB's scheduled and event runs until resumed, or snooze them UNTIL a time or
        for a duration; manual runs still run."""

        async def do(rt: Runtime, requester: Requester, _confirm: str | None) -> CallToolResult:
            override = await operations.pause_job(
                rt, job, requester=requester, until=until, reason=reason
            )
            return ok(pause_dict(job, override))

        return await write(ctx, "pause_job", job, do)

    @server.tool(annotations=RESUME)
    async def resume_job(job: JobArg, ctx: Context) -> CallToolResult:
        """End JOB's pause or snooze (`was_paused`: false when it was not paused)."""

        async def do(rt: Runtime, requester: Requester, _confirm: str | None) -> CallToolResult:
            resumed = await operations.resume_job(rt, job, requester=requester)
            return ok({"job": resumed.job, "was_paused": resumed.was_paused})

        return await write(ctx, "resume_job", job, do)

    @server.tool(annotations=ACT)
    async def emit_event(
        key: Annotated[str, Field(description="The event's key, such as rumor.signal_created")],
        ctx: Context,
        asked: Annotated[Asked, Resolve(ask_emit)],
        data: Annotated[
            dict[str, Any] | None, Field(description="The event's data (a JSON object)")
        ] = None,
        id: Annotated[  # the API's field name
            str | None,
            Field(
                description="The event's id: the same id again returns the event as first "
                "recorded (`new: false`) and starts nothing"
            ),
        ] = None,
        confirm: Annotated[
            bool,
            Field(description="true to confirm listeners with `acts: true` (ask the person)"),
        ] = False,
    ) -> CallToolResult:
        """Record the event KEY with DATA and start (or join, when debounced) the runs of the
        jobs listening for it."""

        async def do(rt: Runtime, requester: Requester, yes: str | None) -> CallToolResult:
            emitted = await operations.emit(
                rt, key, data, requester=requester, event_id=id, confirmed=yes is not None
            )
            return ok(emitted_dict(emitted), emitted.warnings)

        def unconfirmed(rt: Runtime) -> CallToolResult:
            return refused(
                "confirmation_required",
                f"event {key!r} starts jobs that act on the outside world (acts: true): "
                f"{', '.join(_acting_listeners(rt, key))}; nothing was recorded. To emit it, "
                "ask the person, then call emit_event again with confirm: true",
            )

        # `confirm` is a yes here (the API's boolean), passed on as the key.
        confirming = (asked, key if confirm else None)
        return await write(ctx, "emit", key, do, confirming=confirming, unconfirmed=unconfirmed)

    return server


def _asking(ctx: Context, given: object) -> tuple[Runtime, Requester] | None:
    """What a confirmation resolver asks with: the runtime and the requester, when nothing was
    given, the client can be asked and there is a token; None: nobody is asked."""
    if given not in (None, False) or not can_elicit(ctx):
        return None
    server = _server(ctx)
    requester = server.caller_of(ctx).requester
    return None if requester is None else (server.runtime_of(), requester)


async def ask_run_job(
    job: str, params: dict[str, Any] | None, confirm: str | None, ctx: Context
) -> Elicit[Confirmation] | None:
    """Ask the person (when the client can be asked) before an `acts` job runs unconfirmed,
    once the caller may run it; None: nothing to ask."""
    if (asking := _asking(ctx, confirm)) is None:
        return None
    rt, requester = asking
    try:
        resolved = rt.require_catalog().resolve(job)
        await operations.authorize_run_job(rt, job, requester=requester)
    except RunlaneError:
        return None  # the tool refuses it with the reason
    if not resolved.acts:
        return None
    return Elicit(
        f"Run job {job!r} now? It acts on the outside world (acts: true): it runs "
        f"{list(resolved.command)} with params {json.dumps(params or {})}.",
        Confirmation,
    )


def _last_lines(text: str, lines: int, max_bytes: int) -> str:
    """The last `lines` lines of `text`, whole lines only within `max_bytes` bytes of UTF-8 (as
    the log file's tail is read), or the last `max_bytes` bytes of its last line when even that
    one is longer (cut at a character's start)."""
    kept: list[str] = []
    size = 0
    for line in reversed(text.splitlines(keepends=True)[-lines:]):
        length = len(line.encode())
        if size + length > max_bytes:
            if not kept:  # one line longer than the bound: its end
                return line.encode()[-max_bytes:].decode("utf-8", errors="ignore")
            break
        kept.append(line)
        size += length
    return "".join(reversed(kept))


async def ask_run_chain(
    chain: str, confirm: str | None, ctx: Context
) -> Elicit[Confirmation] | None:
    """As `ask_run_job`, for a chain with a step whose job acts."""
    if (asking := _asking(ctx, confirm)) is None:
        return None
    rt, requester = asking
    try:
        await operations.authorize_run_chain(rt, chain, requester=requester)
        acting = _acting_steps(rt, chain)
    except RunlaneError:
        return None
    if not acting:
        return None
    return Elicit(
        f"Run chain {chain!r} now? Its jobs {', '.join(acting)} act on the outside world "
        "(acts: true).",
        Confirmation,
    )


async def ask_emit(key: str, confirm: bool, ctx: Context) -> Elicit[Confirmation] | None:
    """As `ask_run_job`, for an event whose listeners act, once the caller may start them."""
    if (asking := _asking(ctx, confirm)) is None:
        return None
    rt, requester = asking
    try:
        acting = _acting_listeners(rt, key)
        requester.require(Role.OPERATOR, jobs=acting, action="emit")
    except RunlaneError:
        return None
    if not acting:
        return None
    return Elicit(
        f"Emit event {key!r} now? It starts jobs that act on the outside world "
        f"(acts: true): {', '.join(acting)}.",
        Confirmation,
    )


def _confirm_job(rt: Runtime, job: str, params: Mapping[str, Any] | None) -> CallToolResult:
    """The refusal of an unconfirmed `acts` job: what would run, and how to confirm it."""
    command = list(rt.require_catalog().resolve(job).command)
    return refused(
        "confirmation_required",
        f"job {job!r} acts on the outside world (acts: true) and was not started: it would run "
        f"{command} with params {json.dumps(dict(params or {}))}. To run it, ask the person, "
        f"then call run_job again with confirm: {job!r}",
        would_run={"job": job, "command": command, "params": dict(params or {})},
    )


def _acting_steps(rt: Runtime, chain: str) -> list[str]:
    """The jobs of `chain`'s steps that have `acts: true` (none for an unknown chain)."""
    cat = rt.require_catalog()
    if chain not in cat.chains:
        return []
    found = cat.chains[chain]
    return sorted({j for j in map(found.step_job, found.steps) if cat.resolve(j).acts})


def _acting_listeners(rt: Runtime, key: str) -> list[str]:
    """The jobs listening for event `key` that have `acts: true`."""
    from runlane.service.events import subscribers

    cat = rt.require_catalog()
    return sorted({job for job, _ in subscribers(cat, key) if cat.resolve(job).acts})
