"""CLI commands for triggers: the schedule table, chains, events, explain, docs generation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.tree import Tree

from runlane.cli import output
from runlane.cli.inputs import (
    LATEST,
    RANGE_TEXT,
    BadInput,
    check_days,
    check_limit,
    check_range,
    parse_data,
    parse_time,
    run_id_prefix,
)
from runlane.cli.output import err, escape, iso, out, print_columns, print_json, terminal_safe
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import NotFound, RunlaneError
from runlane.ports import ChainRun
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.core.schedule import Pause
    from runlane.service.chains import ChainRunner, StepView

# The catalog, chain, event and schedule services are imported inside the commands that use
# them: at the top they would cost every `runlane` command ~0.3 s of imports.

# `runlane schedule` shows at most this many slots (a year of an every-5-minutes schedule).
MAX_SCHEDULE_ROWS = 100_000

# The same options as the other commands (typer reads these annotations from this module).
CatalogOpt = Annotated[
    str | None, typer.Option("--catalog", "-c", help="Catalog file (env RUNLANE_CATALOG).")
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option("--database", "-d", help="Database URL (env RUNLANE_DATABASE_URL)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON and nothing else.")]


def chain_run_dict(run: ChainRun, steps: list[StepView] | None = None) -> dict[str, Any]:
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


def chain_tree(run: ChainRun, steps: list[StepView]) -> Tree:
    title = (
        f"[bold]{escape(run.chain)}[/] {escape(run.id)} {output.status_text(run.status)}"
        + (" [red]overrun[/]" if run.overrun else "")
        + f"  started {output.short_time(run.started_at)}"
    )
    tree = Tree(title)
    nodes: dict[str, Tree] = {}
    for s in steps:
        parent = nodes.get(s.after[0][0]) if s.after else None
        label = f"{escape(s.step)} {output.status_text(s.status)}"
        if s.job != s.step:
            label += f" [dim]job {escape(s.job)}[/]"
        if s.end_reason and s.end_reason != "exit":
            label += f" ({escape(s.end_reason)})"
        if len(s.after) > 1:
            label += " [dim]after " + ", ".join(escape(p) for p, _ in s.after) + "[/]"
        if s.run_id:
            label += f" [dim]{escape(s.run_id[:8])}[/]"
        nodes[s.step] = (parent or tree).add(label)
    return tree


def register(app: typer.Typer) -> None:
    """Add the trigger commands to the `runlane` app."""
    from runlane.cli.app import friendly, make_directory, settings_from, with_runtime

    chain_app = typer.Typer(no_args_is_help=True, help="Start a chain run; show one as a tree.")
    docs_app = typer.Typer(no_args_is_help=True, help="Generate the schedule table and diagrams.")
    app.add_typer(chain_app, name="chain")
    app.add_typer(docs_app, name="docs")

    def runner(rt: Runtime) -> ChainRunner:
        from runlane.service.chains import ChainRunner

        return ChainRunner(rt.store, rt.require_catalog(), rt.accept)

    @app.command("schedule")
    @friendly
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
        from runlane.catalog.loader import load_catalog
        from runlane.core.schedule import schedule_table
        from runlane.service.scheduler import pause_of, schedule_specs

        settings = settings_from(catalog, database)
        if fmt not in ("table", "md"):
            raise BadInput(f"--format {fmt!r}: expected table or md")
        check_days(days)
        now = datetime.now(UTC)
        t0 = parse_time(start, now, "--from")
        if end is None:
            t1 = t0 + timedelta(days=days)
            if t1 >= LATEST:
                raise BadInput(f"--from {start!r} --days {days:g}: the range must end {RANGE_TEXT}")
        else:
            t1 = parse_time(end, t0, "--to")
        check_range(t0, t1, start, end)
        cat = load_catalog(settings.catalog_path)
        pauses: dict[str, Pause] = {}
        try:

            async def read(rt: Runtime) -> dict[str, Pause]:
                db_now = await rt.store.now()
                found = {}
                for job, override in (await rt.store.overrides()).items():
                    pause = pause_of(override, db_now)
                    if pause is not None:
                        found[job] = pause
                return found

            pauses = with_runtime(settings, read, catalog=False)
        except RunlaneError as exc:
            err.print(f"note: pauses not shown ({escape(exc.message)})")
        # [--from, --to): a slot exactly at --from is in the range, one exactly at --to is not
        # (`--days 1` of an hourly schedule is 24 slots). schedule_table takes start < slot <=
        # end; slots are whole seconds.
        tick = timedelta(microseconds=1)
        rows = schedule_table(
            schedule_specs(cat), t0 - tick, t1 - tick, paused=pauses, limit=MAX_SCHEDULE_ROWS + 1
        )
        if len(rows) > MAX_SCHEDULE_ROWS:
            rows = rows[:MAX_SCHEDULE_ROWS]
            err.print(
                f"note: the range holds more than {MAX_SCHEDULE_ROWS:,} slots; shown are the "
                f"first {MAX_SCHEDULE_ROWS:,}, which end at {iso(rows[-1].slot)} (later slots, "
                "and any others at that time, are not): narrow it with --from/--to or --days",
                markup=False,
            )
        if as_json:
            print_json(
                [
                    {
                        "kind": r.spec.kind,
                        "name": r.spec.target,
                        "cron": r.spec.cron,
                        "tz": r.spec.tz,
                        "slot": iso(r.slot),
                        "local": r.local.isoformat(),
                        "season": r.season,
                        "fires": r.fires,
                        "reason": r.reason,
                    }
                    for r in rows
                ]
            )
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

    @app.command("emit")
    @friendly
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
    ) -> None:
        """Record an event and start (or join, when debounced) the jobs listening for KEY."""
        payload: dict[str, Any] = {} if data is None else parse_data(data)

        async def body(rt: Runtime) -> None:
            from runlane.service.events import emit_event

            emitted = await emit_event(
                rt.store,
                rt.require_catalog(),
                rt.accept,
                key,
                payload,
                event_id=event_id,
                by_person=True,
                confirmed=yes,
                check=rt.check_accept,
            )
            if as_json:
                print_json(
                    {
                        "event": {
                            "id": emitted.event.id,
                            "key": emitted.event.key,
                            "occurred_at": iso(emitted.event.occurred_at),
                            "new": emitted.created,
                        },
                        "runs": [
                            {
                                "job": x.job,
                                "run_id": x.run_id,
                                "started": x.started,
                                "status": r.run.status.value,
                                "end_reason": r.run.end_reason,
                            }
                            for x, r in zip(emitted.links, emitted.runs, strict=True)
                        ],
                    }
                )
                return
            from runlane.cli.app import warn_if_no_launcher, warn_if_no_launcher_knows

            if any(r.run.status is RunStatus.QUEUED for r in emitted.runs):
                await warn_if_no_launcher(rt)  # else its runs wait in silence
            for result in emitted.runs:
                await warn_if_no_launcher_knows(rt, result.run)
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

        with_runtime(settings_from(catalog, database), body)

    @chain_app.command("run")
    @friendly
    def chain_run_cmd(
        name: Annotated[str, typer.Argument(help="The chain to start.")],
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="Confirm steps whose job has acts: true.")
        ] = False,
        as_json: JsonOpt = False,
        catalog: CatalogOpt = None,
        database: DatabaseOpt = None,
    ) -> None:
        """Start a run of chain NAME now (its first steps are queued; a launcher advances it)."""

        async def body(rt: Runtime) -> None:
            cat = rt.require_catalog()
            if name not in cat.chains:
                known = ", ".join(sorted(cat.chains)) or "the catalog has none"
                raise BadInput(f"unknown chain {name!r} (chains: {known})")
            run = await runner(rt).start(
                name, trigger=Trigger.CLI, requested_by="cli", confirmed=yes
            )
            from runlane.cli.app import warn_if_launchers_are_behind, warn_if_no_launcher

            await warn_if_no_launcher(rt)  # else its steps wait in silence
            await warn_if_launchers_are_behind(rt, name)
            from runlane.service.chains import chain_view

            steps = await chain_view(rt.store, rt.require_catalog(), run)
            if as_json:
                print_json(chain_run_dict(run, steps))
            else:
                out.print(f"started chain {escape(name)} as chain run {run.id}")
                out.print(chain_tree(run, steps))

        with_runtime(settings_from(catalog, database), body)

    @chain_app.command("show")
    @friendly
    def chain_show_cmd(
        root_id: Annotated[str, typer.Argument(help="The chain run id (or a unique prefix).")],
        as_json: JsonOpt = False,
        catalog: CatalogOpt = None,
        database: DatabaseOpt = None,
    ) -> None:
        """Show one chain run as a tree with step statuses."""

        async def body(rt: Runtime) -> None:
            run = await find_chain_run(rt, root_id)
            from runlane.service.chains import chain_view

            steps = await chain_view(rt.store, rt.require_catalog(), run)
            if as_json:
                print_json(chain_run_dict(run, steps))
            else:
                out.print(chain_tree(run, steps))

        with_runtime(settings_from(catalog, database), body)

    @app.command("chains")
    @friendly
    def chains_cmd(
        limit: Annotated[
            int, typer.Option("--limit", "-n", help="How many chain runs, 1 to 10000.")
        ] = 10,
        as_json: JsonOpt = False,
        catalog: CatalogOpt = None,
        database: DatabaseOpt = None,
    ) -> None:
        """Recent chain runs, each as a tree with step statuses."""
        check_limit(limit)

        async def body(rt: Runtime) -> None:
            runs = await rt.store.list_chain_runs(limit=limit)
            from runlane.service.chains import chain_view

            views = [(r, await chain_view(rt.store, rt.require_catalog(), r)) for r in runs]
            if as_json:
                print_json([chain_run_dict(r, s) for r, s in views])
                return
            if not views:
                out.print("no chain runs yet")
            for run, steps in views:
                out.print(chain_tree(run, steps))

        with_runtime(settings_from(catalog, database), body)

    @app.command("explain")
    @friendly
    def explain_cmd(
        job: Annotated[str, typer.Argument(help="The job (or chain) to explain.")],
        at: Annotated[
            str | None, typer.Option("--at", help="Time to look at (default now).")
        ] = None,
        as_json: JsonOpt = False,
        catalog: CatalogOpt = None,
        database: DatabaseOpt = None,
    ) -> None:
        """Why JOB's latest slot at or before --at fired, was skipped, deduplicated, paused,
        missed or out of season."""

        async def body(rt: Runtime) -> None:
            when = parse_time(at, await rt.store.now(), "--at")
            from runlane.service.scheduler import explain

            found = await explain(rt.store, rt.require_catalog(), job, when)
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

        with_runtime(settings_from(catalog, database), body)

    @docs_app.command("generate")
    @friendly
    def docs_generate_cmd(
        directory: Annotated[Path, typer.Argument(help="Where to write the Markdown files.")],
        catalog: CatalogOpt = None,
    ) -> None:
        """Write the schedule table and one Mermaid diagram per chain into DIRECTORY."""
        from runlane.catalog.loader import load_catalog
        from runlane.cli.docs_gen import write_docs

        cat: Catalog = load_catalog(settings_from(catalog, None).catalog_path)
        make_directory(directory)
        for path in write_docs(cat, directory):
            out.print(f"wrote {path}")


async def find_chain_run(rt: Runtime, text: str) -> ChainRun:
    prefix = run_id_prefix(text, "chain run")
    try:
        return await rt.store.get_chain_run(prefix)
    except NotFound:
        pass
    matches = [r for r in await rt.store.list_chain_runs(limit=1000) if r.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    typed = text.strip()  # quoted as typed, not as looked up (lowercased)
    raise NotFound(
        f"no chain run with id {typed!r}"
        if not matches
        else f"chain run id prefix {typed!r} is ambiguous ({len(matches)} chain runs)"
    )
