"""The web UI under test: the real HTTP server (tests/api/conftest.py's `running_api`: uvicorn
on 127.0.0.1, SQLite and PostgreSQL), driven with httpx as a browser would be: a GET of the
login form (its double-submit cookie), a POST of a token, then the session cookie."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import ApiServer, api_settings, running_api
from tests.support.postgres import scratch_database

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]*)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a page."""
    found = CSRF_FIELD.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def browser(server: ApiServer) -> httpx.Client:
    """A client with no token and a cookie jar, as a browser is; redirects are not followed,
    so tests see each 303."""
    return httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)


def log_in(client: httpx.Client, secret: str, next_path: str = "/jobs") -> httpx.Response:
    """Log in through the form: GET /login (its CSRF cookie and field), POST the token."""
    form = client.get("/login", params={"next": next_path})
    assert form.status_code == 200
    return client.post(
        "/login", data={"token": secret, "csrf_token": csrf_of(form.text), "next": next_path}
    )


@contextlib.contextmanager
def logged_in(
    server: ApiServer, role: str = "operator", *, secret: str | None = None
) -> Iterator[httpx.Client]:
    """A browser logged in with the token of `role` (or `secret`)."""
    with browser(server) as client:
        answer = log_in(client, secret or server.tokens[role])
        assert answer.status_code == 303, answer.text
        yield client


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def web(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """The server (API and UI) on a fresh database of the module's own, on each dialect."""
    tmp = tmp_path_factory.mktemp(f"web-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp / 'runlane.db'}"
        else:
            url = stack.enter_context(scratch_database("runlane_web"))
        yield stack.enter_context(running_api(api_settings(tmp, url), request.param))
