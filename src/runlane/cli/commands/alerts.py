"""`alerts` (open and recent incidents, what each target was sent, targets failing) and
`alerts test` (a test notification to every target of the catalog)."""

from __future__ import annotations

from typing import Annotated

import typer

from runlane.cli.failures import one_line_errors
from runlane.cli.options import CatalogOpt, DatabaseOpt, JsonOpt, settings_from, with_runtime
from runlane.cli.output import (
    err,
    escape,
    out,
    print_columns,
    print_json,
    short_time,
    terminal_safe,
)
from runlane.service.runtime import Runtime

LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="At most this many incidents.")]


def _sent(notices: dict[str, str]) -> str:
    return ",".join(f"{name}={state}" for name, state in sorted(notices.items())) or "-"


@one_line_errors
def alerts_cmd(
    ctx: typer.Context,
    as_json: JsonOpt = False,
    open_only: Annotated[bool, typer.Option("--open", help="Only the open incidents.")] = False,
    limit: LimitOpt = 50,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Open and recent incidents, newest first, and the notify targets that keep failing."""
    if ctx.invoked_subcommand is not None:
        return
    from runlane.service.operations.alerts import incident_dict, list_incidents, target_dict

    settings = settings_from(catalog, database)

    async def show(rt: Runtime) -> None:
        listed = await list_incidents(rt, limit=limit, open_only=open_only)
        failing = listed.health.failing()
        if as_json:
            print_json(
                {
                    "incidents": [incident_dict(i) for i in listed.incidents],
                    "open_by_rule": dict(listed.health.open_by_rule),
                    "targets": [target_dict(t) for t in listed.health.targets],
                }
            )
            return
        if not listed.incidents:
            out.print("no incidents")
        else:
            print_columns(
                ("STATE", "LEVEL", "RULE", "SUBJECT", "COUNT", "FIRST SEEN", "LAST SEEN", "SENT"),
                (
                    (
                        i.state,
                        i.level,
                        i.rule,
                        terminal_safe(i.subject),
                        str(i.count),
                        short_time(i.first_seen),
                        short_time(i.resolved_at or i.last_seen),
                        terminal_safe(_sent({n: x.sent_state for n, x in i.notices.items()})),
                    )
                    for i in listed.incidents
                ),
            )
        for target in failing:
            out.print(
                f"[red]target {escape(target.target)} is failing[/]: {target.failures} in a row, "
                f"last {escape(terminal_safe(target.last_error or ''))}"
            )

    with_runtime(settings, show, catalog=False)


@one_line_errors
def alerts_test_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """Send a test notification to every notify target; exit 1 if any did not accept it."""
    from runlane.service.operations.alerts import send_test_notifications

    settings = settings_from(catalog, database)

    async def test(rt: Runtime) -> int:
        results = await send_test_notifications(rt)
        if as_json:
            print_json([{"target": r.target, "ok": r.ok, "error": r.error} for r in results])
        elif not results:
            err.print("[yellow]the catalog's alerts: section names no notify target[/]")
        for r in [] if as_json else results:
            if r.ok:
                out.print(f"[green]ok[/]     {escape(r.target)}")
            else:
                out.print(
                    f"[red]failed[/] {escape(r.target)}: {escape(terminal_safe(r.error or ''))}"
                )
        return 0 if results and all(r.ok for r in results) else 1

    raise typer.Exit(with_runtime(settings, test))
