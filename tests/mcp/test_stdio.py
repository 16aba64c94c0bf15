"""`runlane mcp` as a subprocess, with the SDK's stdio client, on SQLite and PostgreSQL: the
identity is the token in RUNLANE_TOKEN; without one only the read tools work; a bad token is
one error line and exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from mcp import Client, StdioServerParameters
from runlane.service import operations
from runlane.service.runtime import Runtime
from tests.mcp.conftest import CLI, make_tokens, refusal, structured


def server_env(rt: Runtime, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLANE_")}
    env.update(
        RUNLANE_DATABASE_URL=rt.settings.database_url,
        RUNLANE_CATALOG=rt.settings.catalog_path,
        RUNLANE_LOG_DIR=rt.settings.log_dir,
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    if token is not None:
        env["RUNLANE_TOKEN"] = token
    return env


@contextlib.asynccontextmanager
async def stdio_client(rt: Runtime, token: str | None) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runlane", "mcp"], env=server_env(rt, token)
    )
    async with asyncio.timeout(60), Client(params) as client:
        yield client


async def test_runlane_mcp_on_stdio_acts_as_the_token(rt: Runtime) -> None:
    secrets = await make_tokens(rt)
    async with stdio_client(rt, secrets["operator"]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        run = structured(await client.call_tool("run_job", {"job": "hello"}))
        acts = refusal(await client.call_tool("run_job", {"job": "careful"}))
        missing = refusal(await client.call_tool("describe_job", {"job": "nope"}))
    assert {"list_jobs", "run_job", "get_run_logs", "explain"} <= names
    assert (run["trigger"], run["requested_by"]) == ("mcp", "operator")
    assert acts[0] == "confirmation_required"
    assert missing[0] == "unknown_job"
    stored = await operations.show_run(rt, run["id"])
    assert stored.requested_by == "operator"
    audit = (await operations.list_audit(rt, limit=5)).items
    assert (audit[0].action, audit[0].remote) == ("run_job", "stdio")


async def test_stdio_viewer_is_refused_writes(rt: Runtime) -> None:
    secrets = await make_tokens(rt)
    async with stdio_client(rt, secrets["viewer"]) as client:
        refused = refusal(await client.call_tool("pause_job", {"job": "hello"}))
    assert refused[0] == "forbidden"


async def test_stdio_without_a_token_reads_only(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    async with stdio_client(rt, None) as client:
        shown = structured(await client.call_tool("get_run", {"run_id": queued.run.id}))
        code, message = refusal(await client.call_tool("cancel_run", {"run_id": queued.run.id}))
    assert shown["id"] == queued.run.id
    assert code == "unauthenticated"
    assert "RUNLANE_TOKEN" in message
    assert (await operations.show_run(rt, queued.run.id)).status.value == "queued"


def run_mcp(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runlane", "mcp"],
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# "rl_\udcff": a RUNLANE_TOKEN whose bytes are not UTF-8 (Python's surrogate escape of 0xff).
@pytest.mark.parametrize("token", ["rl_not-a-token", "garbage", "rl_\udcff"])
async def test_a_bad_token_is_one_line_and_exit_1(rt: Runtime, token: str) -> None:
    done = await asyncio.to_thread(run_mcp, server_env(rt, token))
    assert done.returncode == 1
    assert done.stdout == ""  # the protocol channel stays clean
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "RUNLANE_TOKEN" in lines[0]
    assert "not valid" in lines[0]
    assert "Traceback" not in done.stderr
