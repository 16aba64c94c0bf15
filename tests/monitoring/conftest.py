"""`runlane serve` as a real process for the monitoring tests: the HTTP server and the metrics
listener on free ports, a launcher running real inline runs, tokens made through the CLI; once
per module and per dialect (SQLite, PostgreSQL)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.cli_process import cli_env, postgres_database, runlane
from tests.acceptance.test_cli_serve import answers, free_port
from tests.support.waiting import eventually_sync

PY = sys.executable
PRINT_TRACE = "import os; print('TRACEPARENT=' + os.environ.get('TRACEPARENT', '-'))"

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "{PRINT_TRACE}"]
    schedules: [{{cron: "0 3 * * *"}}]
    on_event: [{{key: greet}}]
  fail:
    command: [{PY}, -c, "import sys; sys.exit(3)"]
    alert: critical
  flaky:
    command: [{PY}, -c, "import os, sys; sys.exit(1 if os.environ['RUNLANE_ATTEMPT'] == '1' else 0)"]
    max_attempts: 2
  boxed:
    command: [{PY}, -c, "pass"]
    executor: pod
  second:
    command: [{PY}, -c, "{PRINT_TRACE}"]
chains:
  pair:
    steps:
      first: {{job: hello}}
      then: {{job: second, after: [{{step: first, on: success}}]}}
"""
JOBS = ("hello", "fail", "flaky", "boxed", "second")
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition: (name, labels) → value."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@dataclass
class Served:
    """A running `runlane serve`: its environment (for CLI calls), URLs and tokens."""

    env: dict[str, str]
    http: str
    metrics: str
    tokens: dict[str, str]
    proc: subprocess.Popen[str]
    stderr: Path

    def request(
        self, method: str, path: str, role: str | None = "admin", **kw: object
    ) -> httpx.Response:
        """One request to the HTTP server with the token of `role` (None: no token)."""
        headers: dict[str, str] = dict(kw.pop("headers", None) or {})  # type: ignore[call-overload]
        if role is not None:
            headers["Authorization"] = f"Bearer {self.tokens[role]}"
        with httpx.Client(base_url=self.http, timeout=30) as client:
            return client.request(method, path, headers=headers, **kw)  # type: ignore[arg-type]

    def scrape(self, role: str = "viewer") -> Samples:
        answer = self.request("GET", "/metrics", role)
        assert answer.status_code == 200, answer.text
        return parse_samples(answer.text)

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return runlane(*args, env={**self.env, **env})


def make_token(env: dict[str, str], role: str) -> str:
    made = runlane("token", "create", f"{role}-{free_port()}", "--role", role, "--json", env=env)
    assert made.returncode == 0, made.stderr
    secret: str = json.loads(made.stdout)["secret"]
    return secret


@contextlib.contextmanager
def serving(tmp: Path, database_url: str | None, *args: str, **settings: str) -> Iterator[Served]:
    """`runlane serve ARGS` on the module's database until the block ends (SIGTERM, then a
    check that it stopped cleanly)."""
    extra = {} if database_url is None else {"RUNLANE_DATABASE_URL": database_url}
    env = cli_env(tmp, CATALOG, **extra, **settings)
    tokens = {role: make_token(env, role) for role in ("viewer", "operator", "admin")}
    http_port, metrics_port = free_port(), free_port()
    env_serve = {
        "RUNLANE_HTTP_ADDR": f"127.0.0.1:{http_port}",
        "RUNLANE_METRICS_ADDR": f"127.0.0.1:{metrics_port}",
        "RUNLANE_LOG_LEVEL": "info",
        "RUNLANE_LOG_FORMAT": "json",
        "RUNLANE_CLAIM_INTERVAL": "0.2",
        "RUNLANE_RETRY_BASE": "0.1",
        "RUNLANE_HEARTBEAT_INTERVAL": "1",
        "RUNLANE_ALERT_INTERVAL": "1",
    }
    env_serve.update(settings)
    stderr = tmp / "serve-stderr.txt"
    with stderr.open("w") as errors:
        proc = subprocess.Popen(
            [PY, "-m", "runlane", "serve", *args],
            env={**env, **env_serve},
            stdout=subprocess.DEVNULL,
            stderr=errors,
            text=True,
        )
        try:
            served = Served(
                env,
                f"http://127.0.0.1:{http_port}",
                f"http://127.0.0.1:{metrics_port}",
                tokens,
                proc,
                stderr,
            )
            yield served
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def wait_until_up(served: Served, url: str) -> None:
    eventually_sync(lambda: answers(url), f"{url} answers", within=30)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp(f"serve-{request.param}")
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(postgres_database())
        server = stack.enter_context(serving(tmp, url))
        wait_until_up(server, f"{server.http}/healthz")
        wait_until_up(server, f"{server.metrics}/metrics")
        yield server
