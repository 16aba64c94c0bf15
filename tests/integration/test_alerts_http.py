"""Notifications over real HTTP on loopback: an ntfy-like server and a webhook receiver get
ntfy's headers, a verifiable HMAC signature, Alertmanager's payload; 429 (Retry-After) and 500
are temporary, 401 permanent; a launcher (two, and a restart) sends one firing per incident;
`runlane alerts` and `runlane alerts test` through the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runlane.adapters.notify import NtfyNotifier, WebhookNotifier
from runlane.catalog.loader import parse_catalog_text
from runlane.ports.notifier import Notification, NotifyPermanentError, NotifyTemporaryError
from runlane.service.accept import RunRequest, accept_run
from runlane.service.alerts.stats import AlertStats
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url
from tests.support.waiting import eventually

PY = sys.executable
FIRING = Notification(
    "run_failed:nightly",
    "firing",
    "critical",
    "nightly failed",
    "exit 1",
    link="https://ui/runs/r1",
    count=3,
    rule="run_failed",
    subject="nightly",
)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback HTTP server that records every request and answers as scripted."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with state.lock:
                state.received.append(Received(self.path, dict(self.headers.items()), body))
                status, headers = state.script.pop(0) if state.script else (200, {})
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


async def test_ntfy_gets_its_headers_and_the_text(receiver: Receiver) -> None:
    notifier = NtfyNotifier("ntfy", f"{receiver.url}/alerts", token="tk_secret")
    try:
        await notifier.send(FIRING, within=5)
        await notifier.send(
            Notification("run_failed:nightly", "resolved", "critical", "nightly failed", "ok"),
            within=5,
        )
    finally:
        await notifier.aclose()
    firing, resolved = receiver.on("/alerts")
    h = {k.lower(): v for k, v in firing.headers.items()}
    assert h["title"] == "nightly failed"
    assert h["priority"] == "5"
    assert h["tags"] == "rotating_light,run_failed,critical"
    assert h["click"] == "https://ui/runs/r1"
    assert h["authorization"] == "Bearer tk_secret"
    assert firing.body == b"exit 1\n(3 occurrences)"
    r = {k.lower(): v for k, v in resolved.headers.items()}
    assert r["title"] == "Resolved: nightly failed"
    assert "white_check_mark" in r["tags"]


async def test_a_webhook_is_signed_and_alertmanager_shaped(receiver: Receiver) -> None:
    plain = WebhookNotifier("hook", f"{receiver.url}/hook", secret="s3cret")
    am = WebhookNotifier(
        "am", f"{receiver.url}/am", body_format="alertmanager", external_url="https://ui"
    )
    try:
        await plain.send(FIRING, within=5)
        await am.send(FIRING, within=5)
    finally:
        await plain.aclose()
        await am.aclose()
    (hook,) = receiver.on("/hook")
    expected = "sha256=" + hmac.new(b"s3cret", hook.body, hashlib.sha256).hexdigest()
    assert hook.headers["X-Runlane-Signature"] == expected
    body = json.loads(hook.body)
    assert body["state"] == "firing"
    assert body["fingerprint"] == "run_failed:nightly"
    assert body["count"] == 3
    assert body["source"] == "runlane"
    (amr,) = receiver.on("/am")
    assert "X-Runlane-Signature" not in amr.headers
    payload = json.loads(amr.body)
    assert payload["version"] == "4"
    assert payload["status"] == "firing"
    assert set(payload) >= {
        "receiver",
        "groupKey",
        "truncatedAlerts",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    }
    (alert,) = payload["alerts"]
    assert alert["labels"]["alertname"] == "run_failed"
    assert alert["labels"]["severity"] == "critical"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert len(alert["fingerprint"]) == 16


async def test_429_and_500_are_temporary_and_401_permanent(receiver: Receiver) -> None:
    receiver.script = [(429, {"Retry-After": "7"}), (500, {}), (401, {})]
    notifier = NtfyNotifier("ntfy", f"{receiver.url}/t")
    try:
        with pytest.raises(NotifyTemporaryError) as busy:
            await notifier.send(FIRING, within=5)
        assert busy.value.retry_after == 7.0
        with pytest.raises(NotifyTemporaryError):
            await notifier.send(FIRING, within=5)
        with pytest.raises(NotifyPermanentError) as refused:
            await notifier.send(FIRING, within=5)
        assert "ntfy: HTTP 401" in refused.value.message
        await notifier.send(FIRING, within=5)  # and then it recovers
    finally:
        await notifier.aclose()
    assert len(receiver.on("/t")) == 4


async def test_a_retry_after_of_superscript_digits_is_unreadable_not_a_crash(
    receiver: Receiver,
) -> None:
    # `"²".isdigit()` is true, but no number: the 429 is temporary with no time of its own.
    receiver.script = [(429, {"Retry-After": "²"})]
    notifier = NtfyNotifier("ntfy", f"{receiver.url}/t")
    try:
        with pytest.raises(NotifyTemporaryError) as busy:
            await notifier.send(FIRING, within=5)
    finally:
        await notifier.aclose()
    assert busy.value.retry_after is None


@pytest.mark.parametrize("token", ["tk_secret\n", "tk_secret\r\nX-Injected: 1", "tk_sécret"])
async def test_a_token_no_header_can_carry_is_permanent_and_not_shown(
    receiver: Receiver, token: str
) -> None:
    # A secret read from a file often ends in a newline: no retry can send it, and no header
    # is ever injected with it.
    notifier = NtfyNotifier("ntfy", f"{receiver.url}/t", token=token)
    try:
        with pytest.raises(NotifyPermanentError) as refused:
            await notifier.send(FIRING, within=5)
    finally:
        await notifier.aclose()
    assert refused.value.message.startswith("ntfy: ")
    assert "tk_s" not in refused.value.message  # the secret is not repeated
    assert receiver.on("/t") == []


def catalog_text(url: str) -> str:
    return f"""
version: 1
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
alerts:
  ui_url: https://runlane.example
  notify:
    - ntfy: {url}/ntfy
      name: phone
    - webhook: {url}/hook
      name: hook
      secret: ${{HALERT_TEST_SECRET}}
jobs:
  boom:
    command: [{PY}, -c, "import sys; sys.exit(2)"]
    alert: critical
"""


async def test_launchers_send_one_firing_per_incident_over_http(
    receiver: Receiver, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HALERT_TEST_SECRET", "hush")
    catalog = parse_catalog_text(catalog_text(receiver.url))
    store = store_from_url(database_url)
    await store.open()
    await store.upgrade()
    launchers: list[tuple[Launcher, asyncio.Task[None]]] = []

    def start(name: str) -> Launcher:
        settings = Settings(
            database_url=database_url,
            log_dir=str(tmp_path / "logs"),
            claim_interval=0.1,
            heartbeat_interval=1.0,
            shutdown_grace=1.0,
            alert_interval=0.5,
            launcher_id=f"{name}-{uuid.uuid4().hex[:6]}",
        )
        launcher = Launcher(
            store=store, catalog=catalog, executors=build_executors(settings), settings=settings
        )
        launcher.alerts.stats = AlertStats()
        launchers.append((launcher, asyncio.create_task(launcher.run())))
        return launcher

    try:
        first = start("a")
        second = start("b")
        for _ in range(3):
            await accept_run(store, catalog, RunRequest(job="boom", trigger="manual"))
        await eventually(
            lambda: receiver.on("/ntfy") and receiver.on("/hook"),
            "both targets notified",
            within=30,
        )
        (_incident,) = await store.open_incidents()
        await eventually(lambda: incident_count(store, 3), "all three failures counted", within=30)
        # A restart: the first launcher stops, a new one starts and evaluates twice.
        first.stop()
        await launchers[0][1]
        third = start("c")
        baseline = third.alerts.stats.evaluations
        await eventually(
            lambda: (
                third.alerts.stats.evaluations >= baseline + 2
                and second.alerts.stats.evaluations >= 2
            ),
            "the new launcher evaluated",
            within=30,
        )
        assert len(receiver.on("/ntfy")) == 1
        assert len(receiver.on("/hook")) == 1
        (hook,) = receiver.on("/hook")
        signature = "sha256=" + hmac.new(b"hush", hook.body, hashlib.sha256).hexdigest()
        assert hook.headers["X-Runlane-Signature"] == signature
        ntfy = {k.lower(): v for k, v in receiver.on("/ntfy")[0].headers.items()}
        assert ntfy["priority"] == "5"
        assert ntfy["click"].startswith("https://runlane.example/runs/")
    finally:
        for launcher, _task in launchers:
            launcher.stop()
        for _launcher, task in launchers:
            async with asyncio.timeout(30):
                await task
        await store.close()


async def incident_count(store: object, count: int) -> bool:
    incidents = await store.open_incidents()  # type: ignore[attr-defined]
    return bool(incidents) and incidents[0].count >= count


def test_the_cli_lists_incidents_and_tests_every_target(receiver: Receiver, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(catalog_text(receiver.url))
    env = dict(
        os.environ,
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}",
        RUNLANE_CATALOG=str(catalog),
        HALERT_TEST_SECRET="hush",
        PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"),
    )

    def runlane(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "runlane", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert runlane("db", "upgrade").returncode == 0
    listed = runlane("alerts", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["incidents"] == []
    tested = runlane("alerts", "test")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "ok     hook" in tested.stdout
    assert "ok     phone" in tested.stdout
    assert len(receiver.on("/ntfy")) == 1
    assert len(receiver.on("/hook")) == 1
    assert "hush" not in tested.stdout + tested.stderr
    receiver.script = [(500, {})]
    failed = runlane("alerts", "test", "--json")
    assert failed.returncode == 1
    results = {r["target"]: r for r in json.loads(failed.stdout)}
    assert results["hook"]["ok"] != results["phone"]["ok"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nalerts:\n  notify:\n    - ntfy: ftp://x\n")
    checked = runlane("catalog", "check", str(bad))
    assert checked.returncode != 0
    assert f"{bad}:4:7: alerts.notify[0]: ntfy must be an http:// or https:// URL" in (
        checked.stdout + checked.stderr
    )
