"""`status` (launchers, queue depth, anything stuck) and `doctor` (every check, with a verdict)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from runlane.cli import output
from runlane.cli.failures import one_line_errors
from runlane.cli.options import (
    CatalogOpt,
    DatabaseOpt,
    JsonOpt,
    run_async,
    settings_from,
    with_runtime,
)
from runlane.cli.output import out, print_json, print_notices
from runlane.service.runtime import Runtime, open_runtime
from runlane.service.views import status_dict

if TYPE_CHECKING:
    pass


@one_line_errors
def status_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """Launchers (and whether each runs the catalog file as it is now), queue depth, anything
    stuck."""
    from runlane.service import operations

    settings = settings_from(catalog, database)

    async def show(rt: Runtime) -> None:
        from runlane.core.durations import format_duration
        from runlane.service.catalog_stamp import short_digest

        report = await operations.status(rt)
        data = status_dict(report)
        if report.alerts is not None:
            from runlane.service.operations.alerts import target_dict

            data["alerts"] = {
                "open_by_rule": dict(report.alerts.open_by_rule),
                "failing_targets": [target_dict(t) for t in report.alerts.failing()],
            }
        if as_json:
            print_json(data)
            return
        out.print(f"queued: {report.queued}   running: {report.running}")
        if not report.launchers:
            out.print("[yellow]no launcher has reported; start one with `runlane serve`[/]")
        for entry in data["launchers"]:
            name = f"launcher {output.escape(entry['launcher_id'])} v{entry['version']}"
            seen = entry["last_seen_seconds"]
            ago = "never" if seen is None else f"{format_duration(seen)} ago ({entry['beat_at']})"
            if entry["stale"]:
                out.print(f"{name} [red]stale[/]: last seen {ago}")
            else:
                running = entry["running"] or {}
                counts = ", ".join(f"{output.escape(k)} {n}" for k, n in sorted(running.items()))
                out.print(
                    f"{name} beat {ago} running {counts or 0} "
                    f"catalog {short_digest(entry['catalog_digest'])}"
                )
        if (queues := report.bus_queues) is not None:
            colour = "red" if queues.job_runs_dlq else "green"
            seen = queues.seen_seconds
            out.print(
                f"bus: job_runs {queues.job_runs} ready, "
                f"[{colour}]job_runs.dlq {queues.job_runs_dlq}[/] "
                f"(read by launcher {output.escape(queues.launcher_id)}"
                f"{'' if seen is None else f' {format_duration(seen)} ago'})"
            )
        print_notices(report.warnings, out)
        for s in report.stuck:
            out.print(
                f"[yellow]stuck[/] run {s.run_id} ({output.escape(s.job)}, {s.status}): "
                f"{output.escape(s.why)}"
            )
        if report.alerts is not None:
            from runlane.service.alerts.health import health_lines

            style = {"ok": "green", "warning": "yellow", "error": "red"}
            for level, message in health_lines(report.alerts):
                if level != "ok" or any(report.alerts.open_by_rule.values()):
                    out.print(f"[{style[level]}]alerts[/] {output.escape(message)}")

    with_runtime(settings, show, catalog=False)


@one_line_errors
def doctor_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """Check the schema, catalog, launchers and runs that need repair (exit 1 on any error)."""
    from runlane.service import operations

    settings = settings_from(catalog, database)

    async def check() -> int:
        async with open_runtime(settings, catalog=False, check_schema=False) as rt:
            report = await operations.doctor(rt)
        if as_json:
            print_json(
                [
                    {"level": f.level, "check": f.check, "message": f.message, "run_id": f.run_id}
                    for f in report.findings
                ]
            )
        else:
            style = {"ok": "green", "warning": "yellow", "error": "red"}
            for f in report.findings:
                out.print(
                    f"[{style[f.level]}]{f.level:7}[/] {f.check:10} "
                    f"{output.escape(output.terminal_safe(f.message))}"
                )
        return 0 if report.healthy else 1

    raise typer.Exit(run_async(check()))
