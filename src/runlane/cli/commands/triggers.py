"""Triggers: the `schedule` table, `emit`, `chain run` / `chain show`, `chains`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from runlane.cli.failures import one_line_errors
from runlane.cli.options import (
    CatalogOpt,
    DatabaseOpt,
    JsonOpt,
    TraceparentOpt,
    cli_requester,
    run_async,
    settings_from,
    with_runtime,
)
from runlane.cli.output import (
    chain_run_dict,
    chain_tree,
    err,
    escape,
    iso,
    out,
    print_columns,
    print_json,
    print_notices,
    terminal_safe,
)
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import InvalidArgument
from runlane.service.runtime import Runtime
from runlane.service.views import emitted_dict, slot_dict


@one_line_errors
def schedule_cmd(
    start: Annotated[str | None, typer.Option("--from", help="Start (default now).")] = None,
    end: Annotated[str | None, typer.Option("--to", help="End (default --days later).")] = None,
    days: Annotated[float, typer.Option("--days", help="Length when --to is absent.")] = 7.0,
    fmt: Annotated[str, typer.Option("--format", help="table or md.")] = "table",
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Every slot of every schedule and chain in a range: local and UTC time, season, and
    whether it would fire (paused, out of season)."""
    from runlane.service import operations

    settings = settings_from(catalog, database)
    if fmt not in ("table", "md"):
        raise InvalidArgument(f"--format {fmt!r}: expected table or md")
    table = run_async(operations.schedule_table(settings, start=start, end=end, days=days))
    for note in table.notes:
        err.print(f"note: {note.message}", markup=False)
    rows = table.rows
    if as_json:
        print_json([slot_dict(r) for r in rows])
        return
    if fmt == "md":
        print("| UTC | Local | Kind | Name | Season | Fires |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {iso(r.slot)} | {r.local:%Y-%m-%d %H:%M %Z} | {r.spec.kind} | "
                f"{r.spec.target} | {r.season or ''} | "
                f"{'yes' if r.fires else 'no (' + r.reason + ')'} |"
            )
        return
    # Plain aligned columns, not a rich Table: rich measures every cell (~0.7 ms a row, so
    # 13 s for a week of an every-minute schedule); this is ~1 us a row.
    print_columns(
        ("utc", "local", "kind", "name", "season", "fires"),
        [
            (
                iso(r.slot) or "",
                f"{r.local:%Y-%m-%d %H:%M %Z}",
                r.spec.kind,
                terminal_safe(r.spec.target),
                terminal_safe(r.season or ""),
                "yes" if r.fires else f"no ({r.reason})",
            )
            for r in rows
        ],
    )


@one_line_errors
def emit_cmd(
    key: Annotated[str, typer.Argument(help="Event key, e.g. rumor.signal_created.")],
    data: Annotated[str | None, typer.Option("--data", help="A JSON object.")] = None,
    event_id: Annotated[
        str | None, typer.Option("--id", help="Event id (idempotent; default: new UUID).")
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm listeners with acts: true.")
    ] = False,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
    traceparent: TraceparentOpt = None,
) -> None:
    """Record an event and start (or join, when debounced) the jobs listening for KEY."""
    from runlane.service import operations

    payload: dict[str, Any] = {} if data is None else operations.parse_event_data(data)

    async def emit(rt: Runtime) -> None:
        emitted = await operations.emit(
            rt,
            key,
            payload,
            requester=operations.Requester(None, Trigger.CLI),
            event_id=event_id,
            confirmed=yes,
            traceparent=traceparent,
        )
        if as_json:
            print_json(emitted_dict(emitted))
            return
        print_notices(emitted.warnings)
        state = "recorded" if emitted.created else "already recorded"
        out.print(f"event {emitted.event.id} {state} ({escape(emitted.event.key)})")
        if not emitted.links:
            out.print("no job listens for this key")
        for link, result in zip(emitted.links, emitted.runs, strict=True):
            if result.run.status is RunStatus.SKIPPED:
                why = escape(result.run.end_reason or "skipped")
                out.print(f"  skipped {escape(link.job)} run {link.run_id} ({why})")
                continue
            verb = "started" if link.started else "joined"
            out.print(f"  {verb} {escape(link.job)} run {link.run_id}")

    with_runtime(settings_from(catalog, database), emit)


@one_line_errors
def chain_run_cmd(
    name: Annotated[str, typer.Argument(help="The chain to start.")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm steps whose job has acts: true.")
    ] = False,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
    traceparent: TraceparentOpt = None,
) -> None:
    """Start a run of chain NAME now (its first steps are queued; a launcher advances it)."""
    from runlane.service import operations

    async def start(rt: Runtime) -> None:
        started = await operations.run_chain(
            rt,
            name,
            requester=cli_requester(login_name=True),  # `$USER`, as `run` records it
            confirmed=yes,
            traceparent=traceparent,
        )
        print_notices(started.warnings)
        run, steps = started.view.run, started.view.steps
        if as_json:
            print_json(chain_run_dict(run, steps))
        else:
            out.print(f"started chain {escape(name)} as chain run {run.id}")
            out.print(chain_tree(run, steps))

    with_runtime(settings_from(catalog, database), start)


@one_line_errors
def chain_show_cmd(
    root_id: Annotated[str, typer.Argument(help="The chain run id (or a unique prefix).")],
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Show one chain run as a tree with step statuses."""
    from runlane.service import operations

    async def show(rt: Runtime) -> None:
        view = await operations.show_chain_run(rt, root_id)
        if as_json:
            print_json(chain_run_dict(view.run, view.steps))
        else:
            out.print(chain_tree(view.run, view.steps))

    with_runtime(settings_from(catalog, database), show)


@one_line_errors
def chains_cmd(
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="How many chain runs, 1 to 10000.")
    ] = 10,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Recent chain runs, each as a tree with step statuses."""
    from runlane.service import operations

    operations.check_limit(limit)  # before the database is opened; list_chain_runs checks it too

    async def list_them(rt: Runtime) -> None:
        views = await operations.list_chain_runs(rt, limit=limit)
        if as_json:
            print_json([chain_run_dict(v.run, v.steps) for v in views])
            return
        if not views:
            out.print("no chain runs yet")
        for view in views:
            out.print(chain_tree(view.run, view.steps))

    with_runtime(settings_from(catalog, database), list_them)
