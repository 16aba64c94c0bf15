"""The test suites' RabbitMQ: a vhost of the session's own, names unique per test, and the lock
that keeps a broker outage (`rabbitmqctl stop_app`) away from the other tests using the broker.

The broker comes from `RUNLANE_TEST_RABBITMQ_URL` (default: guest on 127.0.0.1:5672). An
unreachable broker skips the RabbitMQ tests locally and fails them in CI. With `rabbitmqctl`
(the broker's own host, as root) each session gets a vhost, deleted at the end; without it the
tests share the URL's vhost, kept apart by their queue-name prefixes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

RABBITMQ_URL = os.environ.get("RUNLANE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
# The broker's management HTTP API (the rabbitmq_management plugin; .ci/run enables it).
MANAGEMENT_URL = os.environ.get(
    "RUNLANE_TEST_RABBITMQ_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15672"
)
# Held shared by every RabbitMQ test, exclusively by a test that stops the broker.
BROKER_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "runlane-test-rabbitmq.lock"
CTL_TIMEOUT = 60.0


def rabbitmq_unreachable(reason: str) -> None:
    """Skip locally; in CI a missing RabbitMQ service is a failure, not a skip."""
    message = f"RabbitMQ at {RABBITMQ_URL} is unreachable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def check_reachable(url: str = RABBITMQ_URL, default_port: int = 5672) -> None:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 3
        ):
            pass
    except OSError as exc:
        rabbitmq_unreachable(f"{url.rsplit('@', 1)[-1]}: {exc}")


def management_url() -> str:
    """The management API's URL; skips locally (fails in CI) when its port is closed (the
    plugin is off: `rabbitmq-plugins enable rabbitmq_management`)."""
    check_reachable(MANAGEMENT_URL, 15672)
    return MANAGEMENT_URL


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise RuntimeError("rabbitmqctl is not on PATH")
    return subprocess.run(
        [ctl, *args], capture_output=True, text=True, timeout=CTL_TIMEOUT, check=True
    )


def can_control_broker() -> bool:
    return shutil.which("rabbitmqctl") is not None and os.geteuid() == 0


@contextlib.contextmanager
def session_vhost() -> Iterator[str]:
    """The AMQP URL of a vhost of this session's own (deleted at the end), or of the
    configured one when the broker cannot be administered from here."""
    check_reachable()
    if not can_control_broker():
        yield RABBITMQ_URL
        return
    name = f"runlane-test-{secrets.token_hex(4)}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield urlunsplit(urlsplit(RABBITMQ_URL)._replace(path="/" + quote(name, safe="")))
    finally:
        with contextlib.suppress(subprocess.SubprocessError, RuntimeError):
            rabbitmqctl("delete_vhost", name)


@contextlib.contextmanager
def broker_lock(*, exclusive: bool) -> Iterator[None]:
    with BROKER_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
