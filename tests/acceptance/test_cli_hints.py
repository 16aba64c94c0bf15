"""The hints the CLI gives on stderr when something will not happen as a person expects: no
launcher to start a queued run, launchers whose catalog lacks the job, a missing catalog file.
Real processes on SQLite; a live launcher is faked by writing its heartbeat."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from runlane.catalog import load_catalog
from runlane.ports import Heartbeat
from runlane.service.catalog_stamp import catalog_digest, short_digest, stamp_catalog
from runlane.service.wiring import store_from_url
from tests.acceptance.cli_process import cli_env, runlane

CATALOG = """
version: 1
defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}
jobs:
  echo:
    command: [echo, hi]
"""
# Another file, with a job the launchers' catalog does not have.
BIG_CATALOG = (
    CATALOG
    + """  big:
    command: [echo, big]
"""
)

NO_LAUNCHER = "warning: no launcher is running; start one with `runlane serve`"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # A faked launcher stays live for 3 intervals: longer than any CLI start.
    return cli_env(tmp_path, CATALOG, RUNLANE_HEARTBEAT_INTERVAL="60s")


async def fake_launcher(env: dict[str, str], catalog_file: Path, launcher_id: str) -> None:
    """A live launcher's heartbeat, as `runlane serve` on `catalog_file` writes it."""
    store = store_from_url(env["RUNLANE_DATABASE_URL"])
    await store.open()
    try:
        stamp = stamp_catalog(load_catalog(catalog_file))
        started = await store.now()
        await store.beat(
            Heartbeat(
                launcher_id=launcher_id,
                host="elsewhere",
                pid=1,
                version="test",
                started_at=started,
                catalog_digest=stamp.digest,
                catalog_loaded_at=started,
                catalog_jobs=stamp.jobs,
            )
        )
    finally:
        await store.close()


def warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("warning:")]


async def test_run_without_wait_warns_when_no_launcher_runs(
    env: dict[str, str], tmp_path: Path
) -> None:
    queued = await asyncio.to_thread(runlane, "run", "echo", env=env)
    assert queued.returncode == 0  # queued all the same: that is right
    assert queued.stdout.startswith("queued echo as run ")
    assert warnings(queued.stderr) == [NO_LAUNCHER]

    as_json = await asyncio.to_thread(runlane, "run", "echo", "--json", env=env)
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["status"] == "queued"  # stdout stays one JSON document
    assert warnings(as_json.stderr) == [NO_LAUNCHER]

    # A launcher runs (and knows the job): nothing to say.
    await fake_launcher(env, tmp_path / "catalog.yaml", "live-1")
    quiet = await asyncio.to_thread(runlane, "run", "echo", env=env)
    assert quiet.returncode == 0
    assert quiet.stderr.strip() == ""


async def test_logs_follow_of_a_queued_run_warns_when_no_launcher_runs(
    env: dict[str, str],
) -> None:
    run_id = json.loads(
        (await asyncio.to_thread(runlane, "run", "echo", "--json", env=env)).stdout
    )["id"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runlane",
        "logs",
        "--follow",
        run_id,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(30):
            first = (await proc.stderr.readline()).decode().rstrip("\n")
        assert first == NO_LAUNCHER
        # The run ends (cancelled while queued): the follow ends with it.
        cancel = await asyncio.to_thread(runlane, "cancel", run_id, env=env)
        assert cancel.returncode == 0, cancel.stderr
        async with asyncio.timeout(30):
            out, rest = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert "Traceback" not in rest.decode()
    assert NO_LAUNCHER not in out.decode() + rest.decode()  # said once, on stderr


async def test_the_warning_for_launchers_without_the_job_claims_no_file_they_did_not_load(
    env: dict[str, str], tmp_path: Path
) -> None:
    # The launcher runs catalog.yaml; the person queues from big.yaml, another file.
    await fake_launcher(env, tmp_path / "catalog.yaml", "live-1")
    big = tmp_path / "big.yaml"
    big.write_text(BIG_CATALOG)
    queued = await asyncio.to_thread(
        runlane, "run", "big", env={**env, "RUNLANE_CATALOG": str(big)}
    )
    assert queued.returncode == 0, queued.stderr
    run_id = re.search(r"as run (\S+)", queued.stdout).group(1)  # type: ignore[union-attr]
    (warning,) = warnings(queued.stderr)
    assert f"loaded {big}" not in warning
    assert "before it was added" not in warning
    launcher_digest = short_digest(catalog_digest(load_catalog(tmp_path / "catalog.yaml")))
    assert re.fullmatch(
        r"warning: no running launcher knows job 'big': the catalog each one runs has no such "
        rf"job \(live-1: catalog {launcher_digest} loaded at "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\), while "
        rf"{re.escape(str(big))} \(catalog {short_digest(catalog_digest(load_catalog(big)))}\) "
        rf"has it; run {run_id} waits until `runlane serve` is restarted on a catalog that has "
        r"the job",
        warning,
    ), warning


TRIGGERED = (
    CATALOG
    + """  heard:
    command: [echo, heard]
    on_event: [{key: k.x}]
chains:
  pair:
    steps: {first: {job: echo}, second: {job: heard, after: [{step: first}]}}
"""
)


async def test_emit_and_chain_run_warn_when_no_launcher_runs(tmp_path: Path) -> None:
    # Like `run`: what they queue waits in silence when nothing claims it.
    env = cli_env(tmp_path, TRIGGERED, RUNLANE_HEARTBEAT_INTERVAL="60s")
    emitted = await asyncio.to_thread(runlane, "emit", "k.x", env=env)
    assert emitted.returncode == 0, emitted.stderr
    assert warnings(emitted.stderr) == [NO_LAUNCHER]
    nobody = await asyncio.to_thread(runlane, "emit", "k.none", env=env)
    assert warnings(nobody.stderr) == []  # nothing queued: nothing to wait for
    chain = await asyncio.to_thread(runlane, "chain", "run", "pair", env=env)
    assert chain.returncode == 0, chain.stderr
    assert warnings(chain.stderr) == [NO_LAUNCHER]
    await fake_launcher(env, tmp_path / "catalog.yaml", "live-1")
    for args in (("emit", "k.x"), ("chain", "run", "pair")):
        quiet = await asyncio.to_thread(runlane, *args, env=env)
        assert quiet.returncode == 0, quiet.stderr
        assert warnings(quiet.stderr) == [], quiet.stderr


def test_doctor_says_a_missing_catalog_once(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    proc = runlane("doctor", env={**env, "RUNLANE_CATALOG": str(missing)})
    assert proc.returncode == 1
    said = [ln for ln in proc.stdout.splitlines() if f"{missing}: file not found" in ln]
    assert len(said) == 1, proc.stdout
    assert re.fullmatch(rf"error\s+catalog\s+{re.escape(str(missing))}: file not found", said[0])
    report = json.loads(
        runlane("doctor", "--json", env={**env, "RUNLANE_CATALOG": str(missing)}).stdout
    )
    assert [f["message"] for f in report if f["check"] == "catalog"] == [
        f"{missing}: file not found"
    ]
