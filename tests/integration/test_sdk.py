"""The SDK inside real processes against a real SQLite run log: adoption of RUN_ID, child rows for
nested scopes and subprocesses, failures recorded, and how the trigger is read from the env."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane.core.runs import NewRun, RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.sdk import RunScope, current_scope, params_from_env, run_scope, trigger_from_env
from runlane.sdk import scope as sdk_scope
from runlane.service.wiring import store_from_url
from runlane.testing.clock import FixedClock

SDK_ENV = ("RUN_ID", "RUN_PARENT_ID", "RUN_TRIGGER", "RUNLANE_PARAMS", "RUNLANE_JOB")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for key in (*SDK_ENV, "RUNLANE_DATABASE_URL"):
        monkeypatch.delenv(key, raising=False)
    yield monkeypatch
    sdk_scope._close_store_thread()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = store_from_url(db_url)
    await s.open()
    await s.upgrade()
    yield s
    await s.close()


async def accept_parent(store: Store, job: str = "nightly") -> str:
    run_id = str(uuid.uuid4())
    await store.accept(
        NewRun(
            id=run_id,
            job=job,
            trigger=Trigger.SCHEDULE,
            dedupe_key=f"test:{run_id}",
            executor="inline",
            overlap="allow",
            status=RunStatus.RUNNING,
        )
    )
    return run_id


JOB_SCRIPT = """
import json, os, subprocess, sys
from runlane.sdk import run_scope

out = {}
with run_scope() as outer:
    out["outer"] = [outer.run_id, outer.adopted, outer.trigger, outer.params, outer.job]
    out["env_inside"] = [os.environ.get("RUN_ID"), os.environ.get("RUN_PARENT_ID")]
    with run_scope("inner") as inner:
        out["inner"] = [inner.run_id, inner.parent_run_id, inner.adopted, inner.job]
    try:
        with run_scope("broken") as broken:
            out["broken"] = broken.run_id
            raise RuntimeError("kaput")
    except RuntimeError:
        out["reraised"] = True
    sub = subprocess.run(
        [sys.executable, sys.argv[1]], capture_output=True, text=True, check=True
    )
    out["sub"] = json.loads(sub.stdout)
out["env_after"] = [os.environ.get("RUN_ID"), os.environ.get("RUN_PARENT_ID")]
print(json.dumps(out))
"""

SUB_SCRIPT = """
import json, os
from runlane.sdk import run_scope

with run_scope() as s:
    print(json.dumps([s.run_id, s.parent_run_id, s.adopted, s.job, os.environ.get("RUN_ID")]))
"""


def run_script(
    tmp_path: Path, env: dict[str, str], *, job_script: str | None = None
) -> dict[str, Any]:
    """Run JOB_SCRIPT (or the script `job_script` names in `tmp_path`) with SUB_SCRIPT as its
    subprocess, in `env`; what it printed."""
    job = tmp_path / (job_script or "job.py")
    sub = tmp_path / "sub.py"
    if job_script is None:
        job.write_text(textwrap.dedent(JOB_SCRIPT))
    sub.write_text(textwrap.dedent(SUB_SCRIPT))
    base = {k: v for k, v in os.environ.items() if k not in SDK_ENV}
    done = subprocess.run(
        [sys.executable, str(job), str(sub)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_job_process_adopts_run_and_records_children(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    parent = await accept_parent(store)
    out = await asyncio.to_thread(
        run_script,
        tmp_path,
        {
            "RUN_ID": parent,
            "RUN_TRIGGER": "schedule",
            "RUN_PARENT_ID": "",
            "RUNLANE_JOB": "nightly",
            "RUNLANE_PARAMS": json.dumps({"week": 3}),
            "RUNLANE_DATABASE_URL": db_url,
        },
    )
    # The outermost scope adopts RUN_ID, hides it, and makes itself the parent of subprocesses.
    assert out["outer"] == [parent, True, "schedule", {"week": 3}, "nightly"]
    assert out["env_inside"] == [None, parent]
    assert out["env_after"] == [parent, ""]

    inner_id, inner_parent, inner_adopted, inner_job = out["inner"]
    assert (inner_parent, inner_adopted, inner_job) == (parent, False, "inner")
    inner = await store.get_run(inner_id)
    assert (inner.status, inner.parent_run_id, inner.job) == (RunStatus.SUCCESS, parent, "inner")
    assert (inner.executor, inner.trigger, inner.exit_code) == ("scope", "schedule", 0)
    assert inner.started_at is not None
    assert inner.finished_at is not None

    assert out["reraised"] is True
    broken = await store.get_run(out["broken"])
    assert (broken.status, broken.error_code) == (RunStatus.FAILURE, "exception")
    assert broken.note == "RuntimeError: kaput"

    sub_id, sub_parent, sub_adopted, sub_job, sub_env_run_id = out["sub"]
    assert (sub_parent, sub_adopted, sub_job, sub_env_run_id) == (parent, False, "nightly", None)
    sub = await store.get_run(sub_id)
    assert (sub.status, sub.parent_run_id) == (RunStatus.SUCCESS, parent)

    children = await store.list_runs(RunFilter(parent_run_id=parent))
    assert {r.id for r in children} == {inner_id, out["broken"], sub_id}
    assert (await store.get_run(parent)).status is RunStatus.RUNNING  # the launcher's to end


NESTED_JOB_SCRIPT = """
import json, os, subprocess, sys
from runlane.sdk import run_scope

def sub():
    done = subprocess.run([sys.executable, sys.argv[1]], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)

out = {}
with run_scope() as outer:
    with run_scope("load") as load:
        out["load"] = load.run_id
        out["env_in_load"] = os.environ.get("RUN_PARENT_ID")
        out["sub_in_load"] = sub()
    out["env_after_load"] = os.environ.get("RUN_PARENT_ID")
    out["sub_after_load"] = sub()
print(json.dumps(out))
"""


async def test_a_subprocess_started_in_a_nested_scope_is_recorded_under_that_scope(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    parent = await accept_parent(store)
    (tmp_path / "nested.py").write_text(textwrap.dedent(NESTED_JOB_SCRIPT))
    env = {"RUN_ID": parent, "RUNLANE_JOB": "nightly", "RUNLANE_DATABASE_URL": db_url}
    out = await asyncio.to_thread(run_script, tmp_path, env, job_script="nested.py")
    load_id = out["load"]
    assert out["env_in_load"] == load_id
    sub_id, sub_parent, sub_adopted, *_ = out["sub_in_load"]
    assert (sub_parent, sub_adopted) == (load_id, False)
    sub = await store.get_run(sub_id)
    assert (sub.status, sub.parent_run_id) == (RunStatus.SUCCESS, load_id)
    assert (await store.get_run(load_id)).parent_run_id == parent

    # Once the nested scope has closed, subprocesses belong to the outer run again.
    assert out["env_after_load"] == parent
    later_id, later_parent, *_ = out["sub_after_load"]
    assert later_parent == parent
    assert (await store.get_run(later_id)).parent_run_id == parent


async def test_scopes_that_close_out_of_order_leave_an_open_one_as_the_parent(
    store: Store, db_url: str, clean_env: pytest.MonkeyPatch
) -> None:
    # Scopes of two threads or tasks, entered in turn and closed in the other order: the
    # environment never names a scope that has closed, and is as it was once all have.
    clean_env.setenv("RUNLANE_DATABASE_URL", db_url)
    clean_env.setenv("RUN_ID", "run-1")
    outer, first, second = run_scope(), run_scope("first"), run_scope("second")
    with outer:
        task_a, task_b = contextvars.copy_context(), contextvars.copy_context()
        a = task_a.run(first.__enter__)
        b = task_b.run(second.__enter__)
        assert os.environ["RUN_PARENT_ID"] == b.run_id
        task_a.run(first.__exit__, None, None, None)
        assert os.environ["RUN_PARENT_ID"] == b.run_id
        task_b.run(second.__exit__, None, None, None)
        assert os.environ["RUN_PARENT_ID"] == "run-1"
        assert a.parent_run_id == b.parent_run_id == "run-1"
    assert os.environ["RUN_ID"] == "run-1"
    assert "RUN_PARENT_ID" not in os.environ


async def test_async_scopes_write_rows_from_inside_a_running_loop(
    store: Store, db_url: str, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("RUNLANE_DATABASE_URL", db_url)
    clean_env.setenv("RUN_TRIGGER", "cli")
    async with run_scope("outer") as outer:
        assert not outer.adopted
        assert outer.recorded
        assert current_scope() is outer
        assert os.environ["RUN_PARENT_ID"] == outer.run_id
        seen: list[RunScope] = []

        async def fail_inside() -> None:
            async with run_scope() as inner:
                seen.append(inner)
                raise ValueError("bad week")

        with pytest.raises(ValueError, match="bad week"):
            await fail_inside()
        (inner,) = seen
        assert (inner.parent_run_id, inner.job) == (outer.run_id, "outer")
    assert current_scope() is None
    assert "RUN_PARENT_ID" not in os.environ
    outer_row = await store.get_run(outer.run_id)
    assert (outer_row.status, outer_row.parent_run_id, outer_row.trigger) == (
        RunStatus.SUCCESS,
        None,
        "cli",
    )
    inner_row = await store.get_run(inner.run_id)
    assert (inner_row.status, inner_row.error_code, inner_row.note) == (
        RunStatus.FAILURE,
        "exception",
        "ValueError: bad week",
    )


async def test_unknown_trigger_is_stored_as_manual(
    store: Store, db_url: str, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("RUNLANE_DATABASE_URL", db_url)
    clean_env.setenv("RUN_TRIGGER", "carrier-pigeon")
    with run_scope("odd") as scope:
        assert scope.trigger == "carrier-pigeon"
    assert (await store.get_run(scope.run_id)).trigger == "manual"


def test_adoption_in_process_restores_the_env(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("RUN_ID", "run-1")
    clean_env.setenv("RUN_PARENT_ID", "run-0")
    with run_scope() as scope:
        assert (scope.run_id, scope.parent_run_id, scope.adopted) == ("run-1", "run-0", True)
        assert "RUN_ID" not in os.environ
        assert os.environ["RUN_PARENT_ID"] == "run-1"
    assert (os.environ["RUN_ID"], os.environ["RUN_PARENT_ID"]) == ("run-1", "run-0")


def test_without_a_database_scopes_work_and_warn_once(
    clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clean_env.setattr(sdk_scope, "_warned_no_database", False)
    clean_env.setenv("RUN_ID", "run-1")
    with caplog.at_level(logging.WARNING, logger="runlane.sdk"), run_scope() as outer:
        with run_scope("a") as a:
            assert (a.parent_run_id, a.recorded, a.adopted) == ("run-1", False, False)
        with run_scope("b") as b:
            assert b.parent_run_id == "run-1"
        assert outer.adopted
    warnings = [r for r in caplog.records if "RUNLANE_DATABASE_URL" in r.getMessage()]
    assert len(warnings) == 1


def test_a_scope_object_is_entered_once(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("RUN_ID", "run-1")
    ctx = run_scope()
    with ctx:
        pass
    with pytest.raises(RuntimeError), ctx:
        pass


def test_trigger_from_env_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_TRIGGER", "chain")
    monkeypatch.setenv("HOSTNAME", "nightly-29123456-abcde")
    assert trigger_from_env() == "chain"
    monkeypatch.setenv("RUN_TRIGGER", "")
    assert trigger_from_env() == "schedule"
    monkeypatch.delenv("RUN_TRIGGER")
    assert trigger_from_env() == "schedule"
    monkeypatch.setenv("HOSTNAME", "web-7f9c4d-abcde")  # a Deployment pod: 6 hex, not 8+ digits
    assert trigger_from_env() == "manual"
    assert trigger_from_env(default="cli") == "cli"
    monkeypatch.setenv("HOSTNAME", "nightly-1234567-abcde")  # 7 digits: not a CronJob's Job
    assert trigger_from_env() == "manual"


def test_params_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLANE_PARAMS", raising=False)
    assert params_from_env() == {}
    monkeypatch.setenv("RUNLANE_PARAMS", '{"week": 3, "dry_run": true}')
    assert params_from_env() == {"week": 3, "dry_run": True}
    monkeypatch.setenv("RUNLANE_PARAMS", "{not json")
    with pytest.raises(ValueError, match="RUNLANE_PARAMS is not valid JSON"):
        params_from_env()
    monkeypatch.setenv("RUNLANE_PARAMS", "[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        params_from_env()


def test_params_from_a_mounted_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Params too large for the environment reach a pod as a mounted ConfigMap file.
    monkeypatch.delenv("RUNLANE_PARAMS", raising=False)
    params_file = tmp_path / "params.json"
    params_file.write_text('{"blob": "' + "x" * 100_000 + '"}')
    monkeypatch.setenv("RUNLANE_PARAMS_FILE", str(params_file))
    assert len(params_from_env()["blob"]) == 100_000
    monkeypatch.setenv("RUNLANE_PARAMS_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="cannot read the params file"):
        params_from_env()


CD_JOB = """
import os, subprocess, sys
os.chdir(sys.argv[1])  # a job that runs its steps elsewhere
from runlane.sdk import run_scope
with run_scope() as outer:
    sub = subprocess.run(
        [sys.executable, "-c", "from runlane.sdk import run_scope\\n"
         "with run_scope('step') as s: print(s.run_id, s.recorded)"],
        cwd="/", capture_output=True, text=True, check=True,
    )
    print(sub.stdout.strip())
"""


async def test_a_run_that_changes_directory_records_its_children_in_the_launchers_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher's database named by a relative path (the default `sqlite:///runlane.db`):
    # the run gets it as an absolute path, so its SDK scopes write to the same file from any
    # directory, and no stray database appears where the job went.
    from runlane.catalog import load_catalog
    from runlane.core.runs import Trigger
    from runlane.service.accept import RunRequest
    from runlane.service.config import Settings

    from .conftest import run_to_end

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / "cd_job.py").write_text(CD_JOB)
    (home / "catalog.yaml").write_text(
        "version: 1\njobs:\n  cd:\n"
        f"    command: [{sys.executable}, {home / 'cd_job.py'}, {elsewhere}]\n"
    )
    monkeypatch.chdir(home)
    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    settings = Settings(
        database_url="sqlite:///runlane.db",
        catalog_path="catalog.yaml",
        log_dir="logs",
        claim_interval=0.1,
        shutdown_grace=1.0,
    )
    s = store_from_url(settings.database_url)
    await s.open()
    await s.upgrade()
    try:
        catalog = load_catalog(home / "catalog.yaml")
        [run_id] = await run_to_end(
            s, catalog, settings, [RunRequest(job="cd", trigger=Trigger.CLI)]
        )
        run = await s.get_run(run_id)
        assert run.status is RunStatus.SUCCESS, run.log_tail
        assert run.log_tail is not None
        child_id, recorded = run.log_tail.split()
        assert recorded == "True"
        child = await s.get_run(child_id)
        assert (child.parent_run_id, child.job, child.status) == (run_id, "step", RunStatus.SUCCESS)
    finally:
        await s.close()
    assert not await asyncio.to_thread((elsewhere / "runlane.db").exists)


def test_a_database_url_naming_no_file_creates_none(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.db"
    clean_env.setenv("RUNLANE_DATABASE_URL", f"sqlite:///{missing}")
    with run_scope("a") as scope:
        recorded = scope.recorded
    assert recorded is False
    assert not missing.exists()


HICCUP_SCRIPT = """
import json, sqlite3, sys
from runlane.sdk import run_scope

out = {}
with run_scope("outer") as outer:  # no RUN_ID: a row of its own
    out["outer"] = [outer.run_id, outer.recorded]
    # Another writer holds the database's write lock for longer than the SDK waits for a call.
    blocker = sqlite3.connect(sys.argv[1], isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with run_scope("during") as during:
        out["during"] = during.recorded
    blocker.execute("ROLLBACK")  # the hiccup is over
    with run_scope("after") as after:
        out["after"] = [after.run_id, after.recorded]
print(json.dumps(out))
"""


async def test_a_moment_the_database_is_busy_does_not_end_recording_for_the_process(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    # One call that fails (here SQLite's lock held past the SDK's wait) leaves only that scope
    # unrecorded: the scopes after it are recorded, and the rows written before it are finished.
    # It used to turn recording off for the rest of the process, leaving `outer` running.
    job = tmp_path / "hiccup.py"
    job.write_text(textwrap.dedent(HICCUP_SCRIPT))
    base = {k: v for k, v in os.environ.items() if k not in SDK_ENV}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(job), db_url.removeprefix("sqlite:///")],
        env={**base, "RUNLANE_DATABASE_URL": db_url + "\n"},  # a stray newline is ignored too
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["outer"][1] is True
    assert out["during"] is False
    assert out["after"][1] is True
    assert "could not record run" in done.stderr
    assert "records nothing more" not in done.stderr
    outer, after = await store.get_run(out["outer"][0]), await store.get_run(out["after"][0])
    assert (outer.status, after.status) == (RunStatus.SUCCESS, RunStatus.SUCCESS)
    assert after.parent_run_id == outer.id


async def test_a_database_url_with_a_stray_newline_still_records(
    database_url: str, tmp_path: Path
) -> None:
    # An environment file or secret often ends the URL with a newline. The launcher strips it;
    # the SDK used to add libpq's connect_timeout after it, so PostgreSQL was asked for the
    # database "test\n" and every child row was lost after one warning.
    s = store_from_url(database_url)
    await s.open()
    await s.upgrade()
    try:
        script = tmp_path / "one.py"
        script.write_text(
            "from runlane.sdk import run_scope\n"
            "with run_scope('step') as s:\n    print(s.run_id, s.recorded)\n"
        )
        base = {k: v for k, v in os.environ.items() if k not in SDK_ENV}
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            env={**base, "RUNLANE_DATABASE_URL": database_url + "\n"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        run_id, recorded = done.stdout.split()
        assert recorded == "True", done.stderr
        assert (await s.get_run(run_id)).status is RunStatus.SUCCESS
    finally:
        await s.close()


async def test_a_scope_longer_than_an_hour_is_not_swept_while_its_run_goes_on(
    database_url: str, clean_env: pytest.MonkeyPatch
) -> None:
    # A child row had the run model's default deadline of an hour, whatever its parent's: in a
    # job with a deadline of six hours, a scope still open 70 minutes later was ended `timeout`
    # / `orphaned` by the orphan sweep, and its real outcome was lost with a warning. It has
    # its parent's deadline now.
    s = store_from_url(database_url)
    await s.open()
    await s.upgrade()
    parent = str(uuid.uuid4())
    await s.accept(
        NewRun(
            id=parent,
            job="nightly",
            trigger=Trigger.SCHEDULE,
            dedupe_key=f"test:{parent}",
            executor="inline",
            overlap="allow",
            status=RunStatus.RUNNING,
            deadline_seconds=6 * 3600,
        )
    )
    clean_env.setenv("RUNLANE_DATABASE_URL", database_url)
    clean_env.setenv("RUN_PARENT_ID", parent)
    # Another launcher's sweep, two hours on (its store's clock moved by hand).
    later = store_from_url(database_url, clock=FixedClock(datetime.now(UTC) + timedelta(hours=2)))
    await later.open()
    try:
        scope = run_scope("load")
        step = await scope.__aenter__()
        nested = run_scope("part")
        await nested.__aenter__()
        swept = await later.sweep_orphans(grace=600)
        await nested.__aexit__(None, None, None)
        await scope.__aexit__(None, None, None)
        assert [r.id for r in swept] == []
        run = await s.get_run(step.run_id)
        assert (run.status, run.parent_run_id) == (RunStatus.SUCCESS, parent)
        # Its deadline is its parent's (an unfinished child is swept with it, not before).
        parent_deadline = (await s.get_run(parent)).deadline_at
        assert run.deadline_at is not None
        assert parent_deadline is not None
        assert abs((run.deadline_at - parent_deadline).total_seconds()) < 60
    finally:
        await later.close()
        await s.close()
