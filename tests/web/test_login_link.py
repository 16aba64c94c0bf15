"""The one-time login link: `runlane web` (and `runlane serve`) on a database with no token
makes an admin token and prints a link that opens a session once; the CLI runs as a
subprocess, the browser is httpx."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import CATALOG
from tests.support.waiting import eventually_sync

LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/login\?code=([A-Za-z0-9_-]+)")


def runlane(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    e = dict(os.environ)
    e.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_LOG_LEVEL="warning",
    )
    assert runlane("db", "upgrade", env=e).returncode == 0
    return e


class Output:
    """The lines a subprocess writes, read on a thread so the test can wait for one."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        self.thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self.thread.start()

    def text(self) -> str:
        return "".join(list(self.lines))


@contextlib.contextmanager
def web_process(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    """`runlane web` on a free port until the block ends (then SIGTERM, and its pipe closed)."""
    with subprocess.Popen(
        [sys.executable, "-m", "runlane", "web", "--http-addr", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        output = Output(proc)
        try:
            yield proc, output
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            output.thread.join(timeout=10)


@pytest.fixture
def served(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    with web_process(env) as running:
        yield running


def test_the_login_link_opens_a_session_once(
    served: tuple[subprocess.Popen[str], Output], env: dict[str, str]
) -> None:
    proc, output = served
    eventually_sync(lambda: LINK.search(output.text()) is not None, "the login link", within=30)
    found = LINK.search(output.text())
    assert found is not None
    base, code = found.groups()
    assert "admin" in output.text()
    assert "rl_" not in output.text()  # the token's secret is printed nowhere
    with httpx.Client(base_url=base, timeout=30) as browser:
        opened = browser.get("/login", params={"code": code})
        # A page that goes on to /jobs from this site (a redirect of a navigation that another
        # site started, a chat's link, would arrive without the SameSite=Strict cookie).
        assert opened.status_code == 200
        assert '<meta http-equiv="refresh" content="0; url=/jobs">' in opened.text
        assert "runlane_session" in browser.cookies
        page = browser.get("/jobs")
        assert page.status_code == 200
        assert "admin" in page.text
    with httpx.Client(base_url=base, timeout=30) as second:
        again = second.get("/login", params={"code": code})
        assert again.status_code == 401  # once only
        assert "not valid" in again.text
        assert "runlane_session" not in second.cookies
    listed = runlane("token", "list", "--json", env=env)
    assert '"admin"' in listed.stdout
    assert proc.poll() is None


def test_no_link_on_a_database_that_has_a_token(env: dict[str, str]) -> None:
    assert runlane("token", "create", "me", "--role", "viewer", env=env).returncode == 0
    with web_process({**env, "RUNLANE_LOG_LEVEL": "info"}) as (_proc, output):
        eventually_sync(lambda: "http.no_login_link" in output.text(), "no link", within=30)
    assert "login?code=" not in output.text()
    assert "Traceback" not in output.text()
    listed = runlane("token", "list", "--json", env=env)
    assert '"admin"' not in listed.stdout


def test_the_demo_keeps_the_ui_running_with_serve(tmp_path: Path) -> None:
    env = {**os.environ, "RUNLANE_LOG_LEVEL": "warning", "TMPDIR": str(tmp_path)}
    with subprocess.Popen(
        [sys.executable, "-m", "runlane", "demo", "--serve", "--http-addr", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        output = Output(proc)
        try:
            eventually_sync(lambda: LINK.search(output.text()) is not None, "link", within=90)
            found = LINK.search(output.text())
            assert found is not None
            base, code = found.groups()
            with httpx.Client(base_url=base, timeout=30) as browser:
                assert browser.get("/login", params={"code": code}).status_code == 200
                page = browser.get("/jobs")
                assert page.status_code == 200
                assert 'href="/jobs/nightly-sync"' in page.text  # the demo's catalog
                assert "status-success" in page.text  # the tour's runs
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                code_ = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            output.thread.join(timeout=10)
    assert code_ == 0, output.text()
    assert "Traceback" not in output.text()


SERVING = re.compile(r"serving (http://127\.0\.0\.1:\d+)")


def test_token_login_link_for_an_existing_and_a_new_token(env: dict[str, str]) -> None:
    """`runlane token login-link NAME` (an existing token) and `--role` (a new one, its secret
    shown to nobody): each link opens one session of its token; a revoked token is one line."""
    assert runlane("token", "create", "me", "--role", "viewer", env=env).returncode == 0
    with web_process({**env, "RUNLANE_LOG_LEVEL": "info"}) as (_proc, output):
        eventually_sync(lambda: SERVING.search(output.text()) is not None, "serving", within=90)
        found = SERVING.search(output.text())
        assert found is not None
        base = found.group(1)
        mine = runlane("token", "login-link", "me", "--url", base + "/", env=env)
        made = runlane(
            "token", "login-link", "ops", "--role", "operator", "--json",
            env={**env, "RUNLANE_HTTP_ADDR": "127.0.0.1:8080"},
        )  # fmt: skip
        assert mine.returncode == 0, mine.stderr
        assert made.returncode == 0, made.stderr
        # No token secret is printed (the JSON shows the token's prefix, as `token list` does).
        assert re.search(r"rl_[A-Za-z0-9_-]{40}", mine.stdout + made.stdout) is None
        body = json.loads(made.stdout)
        assert body["created"] is True
        assert body["token"]["role"] == "operator"
        assert body["expires_in_seconds"] == 15 * 60
        # Without --url the link names RUNLANE_HTTP_ADDR's address.
        assert body["url"].startswith("http://127.0.0.1:8080/login?code=")
        links = {"me": LINK.search(mine.stdout), "ops": LINK.search(body["url"])}
        for name, link in links.items():
            assert link is not None, name
            with httpx.Client(base_url=base, timeout=30) as browser:
                opened = browser.get("/login", params={"code": link.group(2)})
                assert opened.status_code == 200, name  # a page that goes on to /jobs
                page = browser.get("/jobs")
                assert page.status_code == 200, name
                assert f'<span class="user">{name} · ' in page.text  # logged in as that token
            with httpx.Client(base_url=base, timeout=30) as again:
                assert again.get("/login", params={"code": link.group(2)}).status_code == 401
    assert runlane("token", "revoke", "me", env=env).returncode == 0
    # The refusals are the operation's (tests/integration/test_login_link_operation.py); here,
    # that the command prints one line with the code's exit status.
    refused = runlane("token", "login-link", "me", "--url", "http://127.0.0.1:1", env=env)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr == "error: token 'me' is revoked: nobody can log in with it\n"
