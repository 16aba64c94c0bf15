"""`runlane demo`: a guided tour on a throwaway SQLite database with the inline executor."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

from rich.live import Live
from rich.panel import Panel

from runlane.cli.output import escape, out, runs_table
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import RunRefused
from runlane.ports import RunFilter
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.operations import Requester, run_job
from runlane.service.runtime import Runtime, open_runtime
from runlane.service.wiring import build_executors

DEMO = Requester("demo", Trigger.CLI)  # who the tour's runs are requested by

STEPS = [
    ("hello", {}, "three plain runs, side by side"),
    ("hello", {}, None),
    ("hello", {}, None),
    ("greet", {"name": "ops", "times": "2"}, "typed params, checked before the run is queued"),
    ("flaky", {}, "a failure that runlane retries (max_attempts: 3)"),
    ("slow-report", {}, "a run past its deadline: SIGTERM, SIGKILL, status timeout"),
    ("nightly-sync", {}, "overlap: forbid — the second request is refused"),
]


def run_demo(
    *, keep: bool = False, time_limit: float = 50.0, serve: tuple[str, int] | None = None
) -> int:
    """Run the tour; return the exit code (0 when every run ended as the tour expects). With
    `serve` (host, port), keep the launcher and the web UI running on the demo's database
    afterwards, until SIGINT or SIGTERM (the one-time login link is printed)."""
    workdir = Path(tempfile.mkdtemp(prefix="runlane-demo-"))
    try:
        code = asyncio.run(_tour(workdir, time_limit))
        if serve is not None and code == 0:
            _serve(workdir, serve)
        return code
    finally:
        if keep:
            out.print(f"\nthe demo's database and logs are in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _settings(workdir: Path) -> Settings:
    """The demo's database, catalog and logs in `workdir`, with the default settings."""
    return Settings(
        database_url=f"sqlite:///{workdir / 'runlane.db'}",
        catalog_path=str(workdir / "catalog.yaml"),
        log_dir=str(workdir / "logs"),
    )


def _serve(workdir: Path, listen: tuple[str, int]) -> None:
    """`runlane serve` on the demo's database: the launcher and the web UI, until a signal."""
    from runlane.api.server import serve_with_http

    out.print(
        "\n[bold]the launcher and the web UI keep running[/] on the demo's database: open "
        "the one-time login link printed below in a browser; Ctrl-C stops them"
    )
    asyncio.run(serve_with_http(_settings(workdir), listen))


async def _tour(workdir: Path, time_limit: float) -> int:
    catalog_path = workdir / "catalog.yaml"
    catalog_path.write_text(files("runlane.cli").joinpath("demo_catalog.yaml").read_text())
    settings = replace(
        _settings(workdir),
        concurrency=8,
        lease_ttl=15.0,
        lease_renew_interval=5.0,
        claim_interval=0.2,
        heartbeat_interval=5.0,
        shutdown_grace=2.0,
    )
    out.print(
        Panel.fit(
            "[bold]runlane demo[/]: one catalog, one run log, an inline launcher.\n"
            f"catalog: {escape(str(catalog_path))}\n"
            "database: a throwaway SQLite file — nothing else needs to run.",
            border_style="cyan",
        )
    )
    async with open_runtime(settings, catalog=True, check_schema=False, create=True) as rt:
        await rt.store.upgrade()
        launcher = Launcher(
            store=rt.store,
            catalog=rt.require_catalog(),
            executors=build_executors(settings),
            settings=settings,
            retry_base_seconds=0.5,
        )
        launcher_task = asyncio.create_task(launcher.run())
        try:
            ok = await _drive(rt, time_limit)
        finally:
            launcher.stop()
            await launcher_task
        runs = await rt.store.list_runs(RunFilter(limit=100))
    out.print(runs_table(list(reversed(runs)), title="every run of the tour"))
    for r in reversed(runs):
        if r.job in ("greet", "slow-report") or (r.job == "flaky"):
            tail = (r.log_tail or "").strip().splitlines()
            shown = escape(tail[-1]) if tail else "(no output)"
            out.print(f"  {escape(r.job)} attempt {r.attempt} printed: [italic]{shown}[/]")
    expected = {
        "hello": RunStatus.SUCCESS,
        "greet": RunStatus.SUCCESS,
        "flaky": RunStatus.SUCCESS,
        "slow-report": RunStatus.TIMEOUT,
        "nightly-sync": RunStatus.SUCCESS,
    }
    last: dict[str, Run] = {}
    for r in reversed(runs):
        last[r.job] = r
    mismatches = [j for j, st in expected.items() if j not in last or last[j].status is not st]
    out.print(
        "\n[bold]what to try next[/] (after ./dev, runlane is .venv/bin/runlane; "
        "`source .venv/bin/activate` puts it on PATH)\n"
        "  runlane init my-jobs && cd my-jobs     a starter catalog\n"
        "  runlane catalog check                   every error, with file:line:col\n"
        "  runlane db upgrade && runlane serve     the launcher (SQLite by default)\n"
        "  runlane run hello --wait                queue a run and follow it\n"
        "  runlane runs --json                     the run log, machine-readable\n"
        "  docs/concepts.md                        the words and the shape\n"
    )
    if mismatches or not ok:
        out.print(
            f"[red]the tour did not end as expected: {', '.join(mismatches) or 'time limit'}[/]"
        )
        return 1
    out.print("[green]tour complete[/]")
    return 0


async def _drive(rt: Runtime, time_limit: float) -> bool:
    ids: list[str] = []
    for job, params, caption in STEPS:
        if caption:
            out.print(f"[bold cyan]→[/] {escape(job)}: {escape(caption)}")
        queued = await run_job(rt, job, requester=DEMO, params=params, params_from_strings=True)
        ids.append(queued.run.id)
    # The overlap refusal and a bad param, through the same operation a person's `runlane run` calls.
    for job, params, what in (
        ("nightly-sync", {}, "a second nightly-sync while the first is active"),
        ("greet", {"name": "ops", "times": "many"}, "greet with times=many"),
    ):
        try:
            await run_job(rt, job, requester=DEMO, params=params, params_from_strings=True)
            out.print(f"[red]unexpected: {what} was accepted[/]")
        except RunRefused as exc:
            out.print(f"[bold cyan]→[/] {escape(what)}: refused — [yellow]{escape(exc.message)}[/]")
    deadline = time.monotonic() + time_limit
    with Live(runs_table([]), console=out, refresh_per_second=8, transient=True) as live:
        while time.monotonic() < deadline:
            runs = await rt.store.list_runs(RunFilter(limit=100))
            live.update(runs_table(list(reversed(runs)), title="live"))
            if runs and all(r.status.is_final for r in runs):
                return True
            await asyncio.sleep(0.25)  # the live table refreshes at this pace
    return False
