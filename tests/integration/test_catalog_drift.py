"""A launcher on an older catalog than the file: its heartbeat says which catalog it runs, and the
CLI (real processes) says so in `status`, `run`, `run --wait` and `doctor`. SQLite and PostgreSQL.

The launchers run in-process with the catalog of `conftest.CATALOG` (no job `fresh`); the CLI
reads a file that adds `fresh`, as after an edit nobody restarted `runlane serve` for.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runlane.catalog import Catalog, load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.catalog_stamp import catalog_digest
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors
from tests.support.cli import cli

from .conftest import CATALOG, PY

FRESH_JOB = f"""  fresh:
    command: [{PY}, -c, "print('fresh ran')"]
"""


def launcher_on(store: Store, catalog: Catalog, settings: Settings, **kw: Any) -> Launcher:
    """A launcher on `catalog` with the inline executor, as `runlane serve` builds one."""
    return Launcher(
        store=store, catalog=catalog, executors=build_executors(settings), settings=settings, **kw
    )


class Counted:
    """Launcher hook: how often each (event, run) happened, and a way to wait for a count."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._waiters: list[tuple[tuple[str, str], int, asyncio.Future[None]]] = []

    def __call__(self, event: str, run_id: str) -> None:
        self.counts[(event, run_id)] += 1
        for key, count, done in self._waiters:
            if self.counts[key] >= count and not done.done():
                done.set_result(None)

    async def reach(self, event: str, run_id: str, count: int, within: float = 30.0) -> None:
        if self.counts[(event, run_id)] >= count:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(((event, run_id), count, done))
        async with asyncio.timeout(within):
            await done


@pytest.fixture
def cli_catalog(tmp_path: Path) -> Path:
    """The catalog file as the CLI reads it: the launchers' catalog plus the job `fresh`."""
    path = tmp_path / "cli-catalog.yaml"
    path.write_text(CATALOG + FRESH_JOB)
    return path


@pytest.fixture
def cli_env(settings: Settings, cli_catalog: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RUNLANE_DATABASE_URL=settings.database_url,
        RUNLANE_CATALOG=str(cli_catalog),
        RUNLANE_LOG_DIR=settings.log_dir,
        # A launcher is live for 3 intervals: long enough that a slow CLI start never sees the
        # in-process launcher as stale.
        RUNLANE_HEARTBEAT_INTERVAL="60s",
        RUNLANE_LOG_LEVEL="warning",
    )
    return env


@pytest.fixture
async def old_launcher(store: Store, catalog: Catalog, settings: Settings) -> Launcher:
    """A launcher on the catalog without `fresh`, its heartbeat written once (not running
    loops): it says it beats every minute, so it stays live through a test's CLI calls."""
    launcher = launcher_on(store, catalog, replace(settings, heartbeat_interval=60.0))
    await launcher.beat()
    return launcher


async def test_a_launchers_heartbeat_carries_the_catalog_it_loaded(
    store: Store, catalog: Catalog, catalog_file: Path, old_launcher: Launcher
) -> None:
    (beat,) = await store.launchers()
    assert beat.launcher_id == old_launcher.owner
    assert beat.catalog_digest == catalog_digest(load_catalog(catalog_file))
    assert beat.catalog_digest is not None
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", beat.catalog_digest)
    assert beat.catalog_jobs == tuple(sorted(catalog.jobs))
    assert "fresh" not in beat.catalog_jobs
    assert beat.catalog_loaded_at is not None
    assert beat.catalog_loaded_at == beat.started_at  # read once, when the launcher started
    assert beat.catalog_path == str(catalog_file)  # absolute, as the heartbeat reports it
    assert beat.catalog_chains == tuple(sorted(catalog.chains))


async def test_status_says_which_launcher_runs_an_older_catalog(
    cli_env: dict[str, str],
    catalog_file: Path,
    cli_catalog: Path,
    old_launcher: Launcher,
    tmp_path: Path,
) -> None:
    # The launcher read another file than the CLI's: the warning names both.
    code, out, _ = await cli(cli_env, "status")
    assert code == 0
    (warning,) = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert re.fullmatch(
        rf"warning: launcher {re.escape(old_launcher.owner)} runs {re.escape(str(catalog_file))} "
        rf"\(loaded at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\), which differs from "
        rf"{re.escape(str(cli_catalog))}: restart it on the catalog it should run",
        warning,
    ), warning

    code, out, _ = await cli(cli_env, "status", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["catalog"]["path"] == str(cli_catalog)
    assert data["catalog"]["catalog_digest"] == catalog_digest(load_catalog(cli_catalog))
    (entry,) = data["launchers"]
    assert entry["catalog_current"] is False
    assert entry["catalog_digest"] == catalog_digest(load_catalog(catalog_file))
    assert entry["catalog_loaded_at"].endswith("Z")
    assert "fresh" not in entry["catalog_jobs"]
    assert entry["catalog_path"] == str(catalog_file)
    assert entry["catalog_chains"] == []

    # The file the launcher loaded, and the same catalog reformatted with a comment: current.
    same = tmp_path / "same.yaml"
    same.write_text(
        "# the same jobs, another layout\n" + CATALOG.replace("version: 1", "version:   1")
    )
    for path in (catalog_file, same):
        code, out, _ = await cli(cli_env, "status", "--catalog", str(path))
        assert code == 0
        assert "warning" not in out, out
        assert "has changed" not in out, out
        code, out, _ = await cli(cli_env, "status", "--json", "--catalog", str(path))
        assert json.loads(out)["launchers"][0]["catalog_current"] is True

    # A file that does not load: the launchers are listed all the same, not compared.
    code, out, _ = await cli(cli_env, "status", "--catalog", str(tmp_path / "missing.yaml"))
    assert code == 0
    assert old_launcher.owner in out
    assert "missing.yaml: file not found: the launchers' catalogs are not compared" in out
    code, out, _ = await cli(
        cli_env, "status", "--json", "--catalog", str(tmp_path / "missing.yaml")
    )
    data = json.loads(out)
    assert data["catalog"]["catalog_digest"] is None
    assert data["launchers"][0]["catalog_current"] is None

    # The launcher's own file, edited since it read it: that file has changed.
    await asyncio.to_thread(catalog_file.write_text, CATALOG + FRESH_JOB)
    code, out, _ = await cli(cli_env, "status", "--catalog", str(catalog_file))
    assert code == 0
    (warning,) = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert re.fullmatch(
        rf"warning: launcher {re.escape(old_launcher.owner)} loaded {re.escape(str(catalog_file))} "
        r"at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; it has changed since: restart it to apply the "
        "change",
        warning,
    ), warning


async def test_run_warns_when_no_live_launcher_knows_the_job(
    store: Store, cli_env: dict[str, str], cli_catalog: Path, old_launcher: Launcher
) -> None:
    code, out, err = await cli(cli_env, "run", "fresh")
    assert code == 0, err
    run_id = re.search(r"as run (\S+)", out).group(1)  # type: ignore[union-attr]
    (warning,) = [ln for ln in err.splitlines() if ln.strip()]
    # The heartbeat does not say which file the launcher read: its catalog is named by digest
    # and load time, never as "{cli_catalog}" (it may be another file altogether).
    assert re.fullmatch(
        rf"warning: no running launcher knows job 'fresh': the catalog each one runs has no such "
        rf"job \({re.escape(old_launcher.owner)}: catalog [0-9a-f]{{12}} from "
        rf"{re.escape(str(old_launcher.settings.catalog_path))} loaded at \S+Z\), while "
        rf"{re.escape(str(cli_catalog))} \(catalog [0-9a-f]{{12}}\) has it; run {run_id} waits "
        r"until `runlane serve` is restarted on a catalog that has the job",
        warning,
    ), warning
    assert (await store.get_run(run_id)).status is RunStatus.QUEUED  # queued all the same

    # --json: the same line on stderr, stdout stays one JSON document.
    code, out, err = await cli(cli_env, "run", "fresh", "--json")
    assert code == 0
    assert json.loads(out)["job"] == "fresh"
    assert "no running launcher knows job 'fresh'" in err

    # A job the launcher knows: no warning, though the file changed.
    code, _, err = await cli(cli_env, "run", "hello")
    assert code == 0
    assert err.strip() == ""


async def test_run_wait_says_once_why_the_run_waits_and_ends_after_a_restart(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    cli_env: dict[str, str],
    cli_catalog: Path,
) -> None:
    hook = Counted()
    # The old launcher looks at a kept run again every 0.2 s (5 min in production): the run
    # goes back to `unknown_job` many times while the CLI polls.
    old = launcher_on(store, catalog, settings, hook=hook, repair_retry_seconds=0.2)
    old_task = asyncio.create_task(old.run())
    await old.beat()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runlane",
        "run",
        "fresh",
        "--wait",
        env=cli_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    new_task: asyncio.Task[None] | None = None
    new: Launcher | None = None
    try:
        async with asyncio.timeout(60):
            first = (await proc.stdout.readline()).decode()
            run_id = re.search(r"as run (\S+);", first).group(1)  # type: ignore[union-attr]
            seen: list[str] = []
            while not any("waits for a restart" in ln for ln in seen):
                line = (await proc.stderr.readline()).decode()
                assert line, f"the CLI ended without the notice: {seen}"
                seen.append(line)
            # Three more round trips through the queue after the notice: the CLI polled the
            # kept run several times since, and said nothing more.
            kept = hook.counts[("finished", run_id)]
            await hook.reach("finished", run_id, kept + 3)
            old.stop()
            await old_task
            # The restart: a launcher on the catalog as the file has it now runs the run.
            new = launcher_on(store, load_catalog(cli_catalog), settings)
            new_task = asyncio.create_task(new.run())
            rest_out, rest_err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if not old_task.done():
            old.stop()
            await old_task
        if new is not None and new_task is not None:
            new.stop()
            await new_task

    stderr = "".join(seen) + rest_err.decode()
    stdout = first + rest_out.decode()
    assert proc.returncode == 0, (stdout, stderr)
    assert "Traceback" not in stderr
    notices = [ln for ln in stderr.splitlines() if "waits for a restart" in ln]
    assert len(notices) == 1, stderr
    assert re.fullmatch(
        rf"warning: run {run_id} waits for a restart: the launcher that claimed it loaded "
        rf"{re.escape(str(cli_catalog))} before job 'fresh' was added and keeps the run for "
        r"repair; restart `runlane serve`: the restarted launcher starts the run at once",
        notices[0],
    ), notices[0]
    assert "no running launcher knows job 'fresh'" in stderr  # said by `run` before waiting
    assert "fresh ran" in stdout
    assert f"run {run_id} (attempt 1) ended success" in stdout
    assert (await store.get_run(run_id)).status is RunStatus.SUCCESS


async def test_emit_and_chain_run_warn_when_the_launchers_run_an_older_catalog(
    cli_env: dict[str, str], cli_catalog: Path, old_launcher: Launcher
) -> None:
    await asyncio.to_thread(
        cli_catalog.write_text,
        CATALOG
        + FRESH_JOB
        + "    on_event: [{key: x.added}]\n"  # on `fresh`, the last job of the file
        + "chains:\n  newchain:\n    steps:\n      hello: {}\n",
    )
    code, _, err = await cli(cli_env, "emit", "x.added")
    assert code == 0, err
    assert "no running launcher knows job 'fresh'" in err
    code, _, err = await cli(cli_env, "chain", "run", "newchain")
    assert code == 0, err
    # The launcher's heartbeat lists its chains: none is `newchain`, so it is known that no
    # running launcher advances it.
    assert re.fullmatch(
        rf"warning: no running launcher has chain 'newchain' \({re.escape(old_launcher.owner)}: "
        rf"catalog [0-9a-f]{{12}} from {re.escape(str(old_launcher.settings.catalog_path))} "
        r"loaded at \S+Z\): restart `runlane serve` on a catalog that has it, or the chain does "
        r"not advance \(it fails `unknown_chain` once no launcher can advance it\)",
        err.strip(),
    ), err
    # A launcher of an older runlane lists no chains (nor its file): all that is known is that
    # it runs another catalog than the file.
    (beat,) = await old_launcher.store.launchers()
    await old_launcher.store.beat(replace(beat, catalog_chains=None, catalog_path=None))
    code, _, err = await cli(cli_env, "chain", "run", "newchain")
    assert code == 0, err
    assert err.strip() == (
        f"warning: every running launcher runs another catalog than {cli_catalog}: if chain "
        "'newchain' or its jobs were added since, restart `runlane serve`, or the chain does not "
        "advance"
    )
    # A launcher on the file's catalog: nothing to warn about.
    current = replace(old_launcher.settings, launcher_id=f"{old_launcher.owner}-current")
    await launcher_on(old_launcher.store, load_catalog(cli_catalog), current).beat()
    code, _, err = await cli(cli_env, "chain", "run", "newchain")
    assert code == 0, err
    assert err.strip() == ""


async def test_a_restarted_launcher_starts_a_kept_run_at_once(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    cli_env: dict[str, str],
    cli_catalog: Path,
) -> None:
    # The old launcher keeps the run for repair for the production 5 minutes; the restart that
    # applies the catalog change starts it now, not at that next look.
    hook = Counted()
    old = launcher_on(store, catalog, settings, hook=hook, repair_retry_seconds=300.0)
    old_task = asyncio.create_task(old.run())
    try:
        code, out, _ = await cli(cli_env, "run", "fresh", "--json")
        assert code == 0, out
        run_id = json.loads(out)["id"]
        await hook.reach("finished", run_id, 1)
    finally:
        old.stop()
        await old_task
    kept = await store.get_run(run_id)
    assert (kept.status, kept.error_code) == (RunStatus.QUEUED, "unknown_job")
    new_hook = Counted()
    new = launcher_on(store, load_catalog(cli_catalog), settings, hook=new_hook)
    new_task = asyncio.create_task(new.run())
    try:
        await new_hook.reach("finished", run_id, 1, within=30.0)
    finally:
        new.stop()
        await new_task
    done = await store.get_run(run_id)
    assert done.status is RunStatus.SUCCESS
    assert done.log_tail == "fresh ran\n"


async def test_a_kept_run_is_handed_to_a_live_launcher_that_has_the_job(
    store: Store, catalog: Catalog, settings: Settings, cli_catalog: Path
) -> None:
    # Two launchers, one restarted on the new catalog and one not yet: the old one gives the run
    # back within seconds (not its 5-minute repair look) for the new one to take.
    new_settings = replace(settings, launcher_id=f"{settings.launcher_id}-new")
    new_hook = Counted()
    new = launcher_on(store, load_catalog(cli_catalog), new_settings, hook=new_hook)
    await new.beat()  # live, with `fresh` in its catalog; not claiming yet
    hook = Counted()
    old = launcher_on(store, catalog, settings, hook=hook, repair_retry_seconds=300.0)
    old_task = asyncio.create_task(old.run())
    try:
        run_id = (
            await accept_run(
                store, load_catalog(cli_catalog), RunRequest(job="fresh", trigger=Trigger.CLI)
            )
        ).run.id
        await hook.reach("finished", run_id, 1)
    finally:
        old.stop()
        await old_task
    kept = await store.get_run(run_id)
    assert (kept.status, kept.error_code) == (RunStatus.QUEUED, "unknown_job")
    assert kept.not_before is not None
    assert (kept.not_before - await store.now()).total_seconds() <= 2.5
    assert kept.note is not None
    assert kept.note.endswith("another live launcher has the job")
    new_task = asyncio.create_task(new.run())
    try:
        await new_hook.reach("finished", run_id, 1, within=30.0)
    finally:
        new.stop()
        await new_task
    assert (await store.get_run(run_id)).status is RunStatus.SUCCESS


async def test_doctor_tells_an_older_launcher_catalog_from_a_job_gone_from_the_file(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    cli_env: dict[str, str],
    cli_catalog: Path,
    tmp_path: Path,
) -> None:
    hook = Counted()
    launcher = launcher_on(store, catalog, settings, hook=hook)
    task = asyncio.create_task(launcher.run())
    try:
        await launcher.beat()
        code, out, _ = await cli(cli_env, "run", "fresh", "--json")
        assert code == 0
        run_id = json.loads(out)["id"]
        await hook.reach("finished", run_id, 1)  # claimed, kept for repair
        kept = await store.get_run(run_id)
        assert (kept.status, kept.error_code) == (RunStatus.QUEUED, "unknown_job")

        # The file has the job: the launcher is behind, and must be restarted.
        code, out, _ = await cli(cli_env, "doctor", "--json")
        assert code == 1
        findings = json.loads(out)
        (repair,) = [f for f in findings if f["run_id"] == run_id]
        assert repair["level"] == "error"
        assert repair["message"].startswith(
            f"run {run_id} (fresh, queued): job 'fresh' is in {cli_catalog}, but the launcher "
            "that claimed the run had loaded an older catalog without it: restart the launcher "
            "(`runlane serve`) to apply the catalog (the restarted launcher starts the run at "
            "once); running without the job: "
        ), repair["message"]
        assert repair["message"].endswith(f"; running without the job: {launcher.owner}")
        assert "not in the catalog" not in repair["message"]
        stale = [
            f for f in findings if f["check"] == "launchers" and "differs from" in f["message"]
        ]
        assert [f["level"] for f in stale] == ["warning"]
        assert stale[0]["message"].startswith(
            f"launcher {launcher.owner} runs {settings.catalog_path} (loaded at "
        )
        assert stale[0]["message"].endswith(
            f"which differs from {cli_catalog}: restart it on the catalog it should run"
        )

        # A file without the job (it was removed again): it is really not in the catalog.
        code, out, _ = await cli(cli_env, "doctor", "--catalog", str(settings.catalog_path))
        assert code == 1
        line = next(ln for ln in out.splitlines() if run_id in ln)
        assert (
            line.split(None, 2)[2]
            == f"run {run_id} (fresh, queued): job 'fresh' is not in the catalog"
        )
        assert "differs from" not in out  # this file is the launcher's catalog
        assert "has changed since" not in out
    finally:
        launcher.stop()
        await task
    assert [r.id for r in await store.list_runs(RunFilter(job="fresh"))] == [run_id]


async def test_status_counts_running_runs_live_from_the_run_log(
    store: Store, catalog: Catalog, settings: Settings, cli_env: dict[str, str]
) -> None:
    # `status` took its launchers' counts from their heartbeats (as old as the last beat) and
    # its total by listing at most 1,000 running runs. Both now come from the run log.
    from datetime import UTC, datetime

    from runlane.ports import Heartbeat

    for _ in range(1005):
        await accept_run(store, catalog, RunRequest(job="hello", trigger=Trigger.CLI))
    taken = await store.claim(
        "L1", limit=2000, lease_ttl=600, executors=["inline"], executor_caps={}
    )
    assert len(taken) == 1005
    now = datetime.now(UTC)
    # L1's last beat predates its claims (it says 0); L2 holds nothing.
    for launcher_id in ("L1", "L2"):
        await store.beat(
            Heartbeat(
                launcher_id, "host", 1, "0", now, running={"inline": 0}, heartbeat_interval=60.0
            )
        )
    code, out, err = await cli(cli_env, "status", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["running"] == 1005
    assert {e["launcher_id"]: e["running"] for e in data["launchers"]} == {
        "L1": {"inline": 1005},
        "L2": {},
    }
    code, out, _ = await cli(cli_env, "status")
    assert "running: 1005" in out.splitlines()[0]
