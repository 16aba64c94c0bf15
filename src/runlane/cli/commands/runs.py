"""Runs: `run` (with `--wait`), `runs` (list, or show one), `logs`, `cancel`."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from runlane.cli import output
from runlane.cli.failures import one_line_errors
from runlane.cli.inputs import parse_params
from runlane.cli.options import (
    CatalogOpt,
    DatabaseOpt,
    JsonOpt,
    TraceparentOpt,
    cli_requester,
    settings_from,
    with_runtime,
)
from runlane.cli.output import err, out, print_json, print_notices, run_dict
from runlane.core.runs import RunStatus
from runlane.errors import InvalidArgument
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.service.operations import OutputItem, RunEnded


@one_line_errors
def run_cmd(
    job: Annotated[str, typer.Argument(help="The job to run.")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE, repeatable.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run to its end.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm a job with acts: true.")
    ] = False,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
    traceparent: TraceparentOpt = None,
) -> None:
    """Queue a run of JOB (exit 2: bad params, 3: overlap refused)."""
    from runlane.service import operations

    settings = settings_from(catalog, database)
    params = parse_params(param or [])
    requester = cli_requester(login_name=True)

    async def queue_and_follow(rt: Runtime) -> int:
        queued = await operations.run_job(
            rt,
            job,
            requester=requester,
            params=params,
            params_from_strings=True,
            confirmed=yes,
            traceparent=traceparent,
        )
        run = queued.run
        if not wait:
            if as_json:
                print_json(run_dict(run))
            else:
                out.print(f"queued {run.job} as run {run.id}")
                if run.note:
                    out.print(f"note: {output.escape(run.note)}")
            # Queued all the same (exit 0), but said: nothing will start it yet.
            print_notices(queued.warnings)
            return 0
        if not as_json:
            out.print(f"queued {run.job} as run {run.id}; waiting for it to finish")
        print_notices(queued.warnings)
        final = run
        async for item in operations.follow_run(rt, run.id, read_output=not as_json):
            ended = print_output(item)
            if ended is not None:
                final = ended.run
        if as_json:
            print_json(run_dict(final))
        else:
            out.print(
                f"run {final.id} (attempt {final.attempt}) ended {output.status_text(final.status.value)}"
                + (f" ({output.escape(final.end_reason)})" if final.end_reason else "")
                # Why it ended so, when the run's output cannot say (a command not found), or
                # what its output lacks, successful or not (a log file cut short).
                + (f": {output.escape(output.terminal_safe(final.note))}" if final.note else "")
            )
        return 0 if final.status is RunStatus.SUCCESS else 1

    raise typer.Exit(with_runtime(settings, queue_and_follow))


def write_output(text: str, *, raw: bool = False) -> None:
    """A job's output on stdout: as it is when piped or with --raw, with its control characters
    shown as escapes on a terminal (a job must not be able to clear or retitle the reader's)."""
    sys.stdout.write(text if raw or not sys.stdout.isatty() else output.terminal_safe(text))


def print_output(item: OutputItem, *, raw: bool = False) -> RunEnded | None:
    """Print one item of a run's output where it goes: the output on stdout, notices and an
    incomplete log's marker on stderr. The `RunEnded` item is returned, not printed."""
    from runlane.service.operations import (
        LogIncomplete,
        Notice,
        OutputBytes,
        OutputSkipped,
        OutputText,
        Retrying,
    )

    if isinstance(item, OutputText):
        if item.raw is not None and (raw or not sys.stdout.isatty()):
            # Read from the log file: its bytes, as `logs` without --follow prints them (the
            # text has U+FFFD for each byte that is not UTF-8).
            sys.stdout.flush()
            sys.stdout.buffer.write(item.raw)
        else:
            write_output(item.text, raw=raw)
        sys.stdout.flush()
    elif isinstance(item, OutputBytes):
        if raw or not sys.stdout.isatty():
            sys.stdout.flush()
            sys.stdout.buffer.write(item.data)  # byte for byte, for tools
        else:
            write_output(item.data.decode("utf-8", "replace"))
    elif isinstance(item, LogIncomplete):
        # The printed text may stop mid-line: the line is ended first, so the tail starts on
        # its own; the file's text goes before the marker, on a terminal showing both.
        if item.line_open:
            sys.stdout.write("\n")
        sys.stdout.flush()
        err.print(output.terminal_safe(item.marker), markup=False, emoji=False)
        if item.tail:
            write_output(item.tail, raw=raw)
            sys.stdout.flush()
    elif isinstance(item, Retrying):
        out.print(
            f"attempt {item.ended.attempt} ended {item.ended.status.value}; retrying as attempt "
            f"{item.next_run.attempt}"
        )
    elif isinstance(item, Notice):
        print_notices((item,))
    elif not isinstance(item, OutputSkipped):  # bytes the reader has: nothing to print
        return item
    return None


@one_line_errors
def runs_cmd(
    run_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="Show one run (the same as `runs show ID`)."),
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this job.")] = None,
    status: Annotated[str | None, typer.Option("--status", help="Only this status.")] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", help="At most N runs, 1 to 10000 [default: 20]."),
    ] = None,
    trigger: Annotated[
        str | None,
        typer.Option("--trigger", help="Only runs of this trigger (manual, schedule, …)."),
    ] = None,
    requested_by: Annotated[
        str | None, typer.Option("--requested-by", help="Only runs this person or token asked for.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Queued at or after this time (ISO-8601, now-1d)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Queued before this time (ISO-8601, now-2h).")
    ] = None,
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """List runs, newest first; `runlane runs ID` (or `runs show ID`) shows one."""
    from runlane.service import operations

    if run_id is not None:
        if run_id == "show":  # `runs --json show`: the word, without the id after it
            raise InvalidArgument("`runs show` needs a run id: runlane runs show ID")
        filters = (
            ("--job", job),
            ("--status", status),
            ("--limit", limit),
            ("--trigger", trigger),
            ("--requested-by", requested_by),
            ("--since", since),
            ("--until", until),
        )
        given = [flag for flag, value in filters if value is not None]
        if given:
            them, verb = ("them", "filter") if len(given) > 1 else ("it", "filters")
            raise InvalidArgument(
                f"{', '.join(given)} {verb} the list of runs; leave {them} out to show run "
                f"{run_id!r}"
            )
        show_run(run_id, as_json, database)
        return
    # Refused before the database is opened (exit 2, nothing read); list_runs checks them again.
    if limit is not None:
        operations.check_limit(limit)
    operations.parse_status(status)
    operations.parse_trigger(trigger, "--trigger")
    settings = settings_from(database=database)

    async def list_them(rt: Runtime) -> None:
        runs = await operations.list_runs(
            rt,
            job=job,
            status=status,
            limit=limit,
            trigger=trigger,
            requested_by=requested_by,
            since=since,
            until=until,
        )
        if as_json:
            print_json([run_dict(r) for r in runs])
        elif not runs:
            out.print("no runs")
        else:
            out.print(output.runs_table(runs))

    with_runtime(settings, list_them, catalog=False)


@one_line_errors
def show_alias(
    run_id: Annotated[
        str, typer.Argument(metavar="ID", help="A run id or a unique prefix of 6+ characters.")
    ],
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Show one run: every column and its log tail (`runlane runs show ID`)."""
    show_run(run_id, as_json, database)


def show_run(run_id: str, as_json: bool, database: str | None) -> None:
    from runlane.service import operations

    settings = settings_from(database=database)

    async def show(rt: Runtime) -> None:
        run = await operations.show_run(rt, run_id)
        if as_json:
            print_json(run_dict(run))
            return
        data = run_dict(run)
        tail = data.pop("log_tail", None)
        data["params"] = (
            json.dumps(run.params) if run.params is not None else f"(corrupt) {run.params_raw}"
        )
        out.print(output.kv_table(data.items()))
        if tail:
            out.print("[bold]log tail[/]")
            tail = output.terminal_safe(tail)  # a view for people, piped or not
            sys.stdout.write(tail if tail.endswith("\n") else tail + "\n")

    with_runtime(settings, show, catalog=False)


@one_line_errors
def logs_cmd(
    run_id: str,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends.")
    ] = False,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="Print control characters as they are, even on a terminal."),
    ] = False,
    database: DatabaseOpt = None,
) -> None:
    """Print a run's output (the per-run log file, or the saved tail). On a terminal, control
    characters (escape sequences) are shown as escapes unless --raw; piped, output is as is."""
    from runlane.service import operations

    settings = settings_from(database=database)

    async def print_log(rt: Runtime) -> None:
        async for item in operations.run_output(rt, run_id, follow=follow):
            print_output(item, raw=raw)

    with_runtime(settings, print_log, catalog=False)


@one_line_errors
def cancel_cmd(run_id: str, as_json: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """Cancel a queued or running run, or a running chain run (with its unfinished steps)."""
    from runlane.service import operations

    settings = settings_from(database=database)

    async def cancel(rt: Runtime) -> None:
        done = await operations.cancel(rt, run_id, requester=cli_requester())
        if isinstance(done, operations.CancelledChainRun):
            chain_run = done.chain_run
            if as_json:
                print_json(
                    {
                        **output.chain_run_dict(chain_run),
                        "cancelled_steps": [run_dict(r) for r in done.steps],
                    }
                )
                return
            out.print(f"cancelled chain run {chain_run.id} ({output.escape(chain_run.chain)})")
            for step in done.steps:
                verb = (
                    "cancelled"
                    if step.status is RunStatus.CANCELLED
                    else "asked the launcher to cancel"
                )
                out.print(
                    f"  {verb} run {step.id} ({output.escape(step.job)}, {step.status.value})"
                )
            return
        run = done.run
        if as_json:
            print_json(run_dict(run))
        elif run.status is RunStatus.CANCELLED:
            out.print(f"cancelled run {run.id}")
        else:
            out.print(f"asked the launcher to cancel run {run.id} ({run.status.value})")

    with_runtime(settings, cancel, catalog=False)
