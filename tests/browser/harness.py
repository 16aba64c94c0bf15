"""What the browser tests stand on: Debian's Chromium driven by Playwright through its
executable path, axe-core from npm (package.json at the repo root), and `runlane serve` as a
real process (launcher and HTTP server, inline executor) on SQLite with a seeded catalog.

Outside CI a missing Chromium or axe-core skips the browser tests with the reason; in CI
(`CI=true`) it fails them: `./dev test` installs both (apt's `chromium`, `npm ci`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from runlane.core.runs import RunStatus
from tests.support.waiting import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

# The flags Chromium needs on this machine kind (/work/.library/env/machines/python-svc.md):
# no sandbox (root in CI), no GPU, and none of its background connections to Google's hosts,
# which the closed network refuses. Playwright gives every launch a fresh, empty profile.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
AXE_SCRIPT = ROOT / "node_modules" / "axe-core" / "axe.min.js"
STEP_TIMEOUT_MS = 10_000  # any one browser action or expectation

# The seeded catalog. `report` has one param of each type; `sync` has schedules in two zones; `trade` acts on the world; `slow`
# prints a line every 0.4 s for a few seconds; `broken` fails; `echo` prints its param, and
# `hostile` prints markup meant to run (both must show as text); `nightly` is a chain with a
# success edge and a finish edge after a failing step.
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 1h, kill_grace: 1s, timezone: Europe/Berlin}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  report:
    command: [{PY}, -c, "import os; print('count', os.environ['RUNLANE_PARAM_COUNT'])"]
    params: {{count: int, label: str?, mode: "choice[fast,slow]?", dry: bool?}}
    description: a job with typed params
  sync:
    command: [{PY}, -c, "print('synced')"]
    schedules: [{{cron: "0 6 * * *", tz: America/New_York}}, {{cron: "15 3 * * 1"}}]
  trade:
    command: [{PY}, -c, "print('traded')"]
    acts: true
    description: acts on the world
  slow:
    command: [{PY}, -u, -c, "import time\\nfor i in range(12):\\n    print('tick', i, flush=True)\\n    time.sleep(0.25)"]
  broken:
    command: [{PY}, -c, "import sys; print('about to fail'); sys.exit(2)"]
  echo:
    command: [{PY}, -c, "import os; print(os.environ['RUNLANE_PARAM_TEXT'])"]
    params: {{text: str}}
  hostile:
    command: [{PY}, -c, {json.dumps(f"print({HOSTILE!r})")}]
chains:
  nightly:
    steps:
      first: {{job: hostile}}
      second: {{job: broken, after: [{{step: first, on: success}}]}}
      third: {{job: hostile, after: [{{step: second, on: finish}}]}}
      fourth: {{job: hostile, after: [{{step: second, on: success}}]}}
"""
ROLES = ("admin", "operator", "viewer")


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def missing(what: str) -> NoReturn:
    """A browser test cannot run without `what`: a failure in CI, a skip elsewhere."""
    if in_ci():
        pytest.fail(f"{what} (required in CI: ./dev test installs it)", pytrace=False)
    pytest.skip(what)


def chromium_executable() -> str:
    """Debian's Chromium (or RUNLANE_TEST_CHROMIUM), never a browser Playwright downloads."""
    wanted = os.environ.get("RUNLANE_TEST_CHROMIUM", "/usr/bin/chromium")
    found = shutil.which(wanted)
    if found is None:
        missing(f"no Chromium at {wanted} (apt-get install chromium, or set RUNLANE_TEST_CHROMIUM)")
    return found


def axe_script() -> Path:
    if not AXE_SCRIPT.is_file():
        missing(f"no axe-core at {AXE_SCRIPT} (run `npm ci` at the repository root)")
    return AXE_SCRIPT


def artifacts_dir() -> Path:
    """Where the screenshots go: RUNLANE_ARTIFACTS (default .artifacts)/screenshots."""
    base = Path(os.environ.get("RUNLANE_ARTIFACTS", ROOT / ".artifacts"))
    path = base / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class UiServer:
    """`runlane serve` on a free loopback port: its URL, environment, and a token per role."""

    base_url: str
    env: dict[str, str]
    tmp: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`runlane ARGS` on the same database and catalog; a failure fails the test."""
        done = subprocess.run(
            [PY, "-m", "runlane", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done

    def api(self, role: str = "admin") -> httpx.Client:
        """The HTTP API with `role`'s bearer token (reads that check what a page did)."""
        return httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.tokens[role]}"},
            timeout=10,
        )

    def queue(self, job: str, acts: bool = False, **params: Any) -> str:
        """Queue a run of `job` through the API (as the admin); its id."""
        body: dict[str, Any] = {"params": params}
        if acts:
            body["confirm"] = job
        with self.api() as api:
            answer = api.post(f"/api/v1/jobs/{job}/runs", json=body)
            assert answer.status_code in (200, 201), answer.text
            return str(answer.json()["id"])

    def run_chain(self, chain: str) -> str:
        with self.api() as api:
            answer = api.post(f"/api/v1/chains/{chain}/runs", json={})
            assert answer.status_code in (200, 201), answer.text
            return str(answer.json()["id"])

    def chain_run(self, chain_run_id: str) -> dict[str, Any]:
        with self.api() as api:
            answer = api.get(f"/api/v1/chain-runs/{chain_run_id}")
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found

    def job(self, job: str) -> dict[str, Any]:
        with self.api() as api:
            answer = api.get(f"/api/v1/jobs/{job}")
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found

    def run(self, run_id: str) -> dict[str, Any]:
        with self.api() as api:
            answer = api.get(f"/api/v1/runs/{run_id}")
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found

    def runs_of(self, job: str) -> list[dict[str, Any]]:
        with self.api() as api:
            answer = api.get("/api/v1/runs", params={"job": job, "limit": 100})
            assert answer.status_code == 200, answer.text
            items: list[dict[str, Any]] = answer.json()["items"]
            return items

    def finished(self, run_id: str, *, within: float = 30) -> dict[str, Any]:
        """The run once it has ended (polled through the API, bounded)."""
        return eventually_sync(
            lambda: RunStatus((found := self.run(run_id))["status"]).is_final and found,
            f"run {run_id} ends",
            within=within,
            poll=0.1,
        )


@contextmanager
def serving(tmp: Path) -> Iterator[UiServer]:
    """A fresh SQLite database (migrated), the catalog, admin/operator/viewer tokens, then
    `runlane serve` until the block ends (SIGTERM, then a kill if it lingers)."""
    (tmp / "catalog.yaml").write_text(CATALOG)
    port = free_port()
    env = dict(os.environ)
    env.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp / "logs"),
        RUNLANE_LOG_LEVEL="warning",
        RUNLANE_HTTP_ADDR=f"127.0.0.1:{port}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])),
    )
    server = UiServer(base_url=f"http://127.0.0.1:{port}", env=env, tmp=tmp)
    server.cli("db", "upgrade")
    for role in ROLES:
        made = server.cli("token", "create", f"{role}-person", "--role", role, "--json")
        server.tokens[role] = json.loads(made.stdout)["secret"]
    with (tmp / "serve-stderr.txt").open("w") as errors:
        proc = subprocess.Popen(
            [PY, "-m", "runlane", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=errors
        )
        try:
            eventually_sync(
                lambda: proc.poll() is not None or _answers(f"{server.base_url}/healthz"),
                "runlane serve answers /healthz",
                within=60,
                poll=0.1,
            )
            if proc.poll() is not None:
                raise AssertionError(
                    f"runlane serve exited: {(tmp / 'serve-stderr.txt').read_text()}"
                )
            yield server
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False
