"""Logging in and out of the web UI, its session cookie, and what ends a session."""

from __future__ import annotations

from runlane.core.access import Role
from runlane.service import operations
from tests.api.conftest import CLI, ApiServer
from tests.web.conftest import browser, csrf_of, log_in, logged_in


def test_an_anonymous_browser_is_sent_to_the_login_page(web: ApiServer) -> None:
    with browser(web) as client:
        answer = client.get("/jobs/hello", params={"at": "now"})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login?next=%2Fjobs%2Fhello%3Fat%3Dnow"
        assert client.get("/").headers["location"] == "/jobs"


def test_login_sets_a_strict_http_only_cookie_and_logout_ends_the_session(
    web: ApiServer,
) -> None:
    with browser(web) as client:
        answer = log_in(client, web.tokens["viewer"], next_path="/jobs?q=etl")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/jobs?q=etl"
        (cookie,) = [
            c for c in answer.headers.get_list("set-cookie") if c.startswith("runlane_session=")
        ]
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert {"httponly", "samesite=strict", "path=/"} <= flags
        assert "secure" not in flags  # plain HTTP here
        jobs = client.get("/jobs")
        assert jobs.status_code == 200
        assert "viewer" in jobs.text
        logout = client.post("/logout", data={"csrf_token": csrf_of(jobs.text)})
        assert logout.status_code == 303
        assert client.get("/jobs").status_code == 303  # the cookie is gone


def test_a_stolen_cookie_is_worthless_after_logout(web: ApiServer) -> None:
    with logged_in(web, "viewer") as client:
        secret = client.cookies["runlane_session"]
        page = client.get("/jobs")
        client.post("/logout", data={"csrf_token": csrf_of(page.text)})
    with browser(web) as thief:
        thief.cookies.set("runlane_session", secret)
        assert thief.get("/jobs").status_code == 303  # the row is deleted


def test_a_bad_token_re_renders_the_form_with_401(web: ApiServer) -> None:
    with browser(web) as client:
        answer = log_in(client, "rl_not-a-token")
        assert answer.status_code == 401
        assert "not valid" in answer.text
        assert "runlane_session" not in client.cookies


def test_revoking_the_token_ends_its_sessions_at_once(web: ApiServer) -> None:
    made = web.call(
        lambda rt: operations.create_token(rt, "short-lived", role=Role.VIEWER, requester=CLI)
    )
    with logged_in(web, secret=made.secret) as client:
        assert client.get("/jobs").status_code == 200
        web.call(lambda rt: operations.revoke_token(rt, "short-lived", requester=CLI))
        assert client.get("/jobs").status_code == 303
