"""Jobs: `jobs` (the table), `pause` / `resume`, `explain`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from runlane.cli import output
from runlane.cli.failures import one_line_errors
from runlane.cli.options import (
    CatalogOpt,
    DatabaseOpt,
    JsonOpt,
    cli_requester,
    settings_from,
    with_runtime,
)
from runlane.cli.output import escape, iso, out, print_json
from runlane.service.runtime import Runtime
from runlane.service.views import job_dict

if TYPE_CHECKING:
    pass


@one_line_errors
def pause_cmd(
    job: str,
    until: Annotated[
        str | None, typer.Option("--until", help="A duration (2h) or an ISO time.")
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, for the people who look.")
    ] = None,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Pause (or snooze, with --until) a job's scheduled and event runs."""
    from runlane.service import operations

    settings = settings_from(catalog, database)
    requester = cli_requester()

    async def pause(rt: Runtime) -> None:
        ov = await operations.pause_job(rt, job, requester=requester, until=until, reason=reason)
        when = f" until {output.iso(ov.paused_until)}" if ov.paused_until else " until resumed"
        out.print(f"paused {job}{when}")

    with_runtime(settings, pause)


@one_line_errors
def resume_cmd(job: str, catalog: CatalogOpt = None, database: DatabaseOpt = None) -> None:
    """Resume a paused job."""
    from runlane.service import operations

    settings = settings_from(catalog, database)
    requester = cli_requester()

    async def resume(rt: Runtime) -> None:
        if (await operations.resume_job(rt, job, requester=requester)).was_paused:
            out.print(f"resumed {job}")
        else:
            out.print(f"{job} was not paused")

    with_runtime(settings, resume)


@one_line_errors
def jobs_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """List the catalog's jobs with their settings and pause state."""
    from runlane.service import operations

    settings = settings_from(catalog, database)

    async def list_them(rt: Runtime) -> None:
        rows = [job_dict(info) for info in await operations.list_jobs(rt)]
        if as_json:
            print_json(rows)
            return
        from rich import box
        from rich.table import Table

        from runlane.core.durations import format_duration

        # Laid out as the runs table is (no outer edge, one space between columns), so that
        # 80 columns or a pipe leave room for what wraps.
        table = Table(
            header_style="bold",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        for col in (
            "job",
            "executor",
            "overlap",
            "tries",
            "deadline",
            "schedules",
            "params",
            "state",
        ):
            # Names and settings stay on one line; only schedules, params and state wrap, and
            # are folded rather than cut, so a narrow or piped table still says `paused`.
            if col in ("schedules", "params", "state"):
                table.add_column(col, overflow="fold", min_width=6 if col == "state" else None)
            else:
                table.add_column(col, no_wrap=True)
        for r in rows:
            table.add_row(
                output.escape(r["job"]),
                r["executor"],
                r["overlap"],
                str(r["max_attempts"]),
                format_duration(r["deadline_seconds"]),
                output.escape(", ".join(r["schedules"])) or "-",
                output.escape(", ".join(f"{k}: {v}" for k, v in r["params"].items())) or "-",
                _pause_state(r),
            )
        out.print(table)

    with_runtime(settings, list_them)


def _pause_state(row: dict[str, Any]) -> str:
    """`active`, or `paused until …: reason`, for the jobs table (the reason is anybody's text)."""
    if not row["paused"]:
        return "active"
    state = "paused" + (f" until {row['paused_until']}" if row["paused_until"] else "")
    if row["pause_reason"]:
        state += f": {output.terminal_safe(row['pause_reason'])}"
    return output.escape(state)


@one_line_errors
def explain_cmd(
    job: Annotated[str, typer.Argument(help="The job (or chain) to explain.")],
    at: Annotated[str | None, typer.Option("--at", help="Time to look at (default now).")] = None,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Why JOB's latest slot at or before --at fired, was skipped, deduplicated, paused,
    missed or out of season."""
    from runlane.service import operations

    async def explain(rt: Runtime) -> None:
        found = await operations.explain(rt, job, at=at)
        if as_json:
            print_json(
                {
                    "job": found.job,
                    "at": iso(found.at),
                    "slot": iso(found.slot),
                    "verdict": found.verdict,
                    "run_id": found.run_id,
                    "lines": found.lines,
                }
            )
            return
        # Pause reasons and notes are anybody's text: no control characters reach the terminal.
        safe = output.terminal_safe
        out.print(f"[bold]{escape(safe(job))}[/]: {escape(safe(found.verdict))}")
        for line in found.lines:
            out.print(f"  {escape(safe(line))}")

    with_runtime(settings_from(catalog, database), explain)
