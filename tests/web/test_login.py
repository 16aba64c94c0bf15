"""Logging in and out of the web UI, its session cookie, and what ends a session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runlane.core.access import Role
from runlane.service import operations
from tests.api.conftest import CLI, ApiServer, api_settings, running_api
from tests.web.conftest import browser, csrf_of, log_in, logged_in

HTTPS = {"X-Forwarded-Proto": "https"}  # from a trusted proxy: the browser used HTTPS


@pytest.fixture(scope="module")
def behind_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The UI behind a TLS-terminating proxy that it trusts (the tests connect from it)."""
    tmp = tmp_path_factory.mktemp("web-tls")
    settings = api_settings(
        tmp, f"sqlite:///{tmp / 'runlane.db'}", http_trusted_proxies=("127.0.0.0/8",)
    )
    with running_api(settings, "sqlite") as server:
        yield server


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


def test_over_https_the_session_cookie_is_a_host_cookie(behind_tls: ApiServer) -> None:
    # `__Host-`: a browser keeps it only Secure, for Path=/ and without Domain, so neither a
    # sibling subdomain nor a plain-HTTP answer can plant a session of its own choosing.
    # (httpx sends no Secure cookie to an http:// URL: the Cookie header is written by hand.)
    with browser(behind_tls) as client:
        form = client.get("/login", headers=HTTPS)
        login_cookie = form.headers["set-cookie"].split(";")[0]
        answer = client.post(
            "/login",
            data={"token": behind_tls.tokens["viewer"], "csrf_token": csrf_of(form.text)},
            # A browser that logged in over HTTPS before the prefix holds the old cookie.
            headers={**HTTPS, "Cookie": f"{login_cookie}; runlane_session=from-before"},
        )
        assert answer.status_code == 303, answer.text
        set_cookies = answer.headers.get_list("set-cookie")
        (old,) = [c for c in set_cookies if c.startswith("runlane_session=")]
        assert "max-age=0" in old.lower()  # removed
        (cookie,) = [c for c in set_cookies if c.startswith("__Host-runlane_session=")]
        name, _, rest = cookie.partition("=")
        assert name == "__Host-runlane_session"
        flags = {part.strip().lower() for part in rest.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/", "secure"} <= flags
        assert not any(flag.startswith("domain") for flag in flags)
        secret = rest.split(";")[0]
    with browser(behind_tls) as client:
        jobs = client.get("/jobs", headers={**HTTPS, "Cookie": f"__Host-runlane_session={secret}"})
        assert jobs.status_code == 200
        api = client.get(
            "/api/v1/jobs", headers={**HTTPS, "Cookie": f"__Host-runlane_session={secret}"}
        )
        assert api.status_code == 200
        # The cookie without its prefix, as another host could have set it, opens nothing.
        planted = {**HTTPS, "Cookie": f"runlane_session={secret}"}
        assert client.get("/jobs", headers=planted).status_code == 303
        assert client.get("/api/v1/jobs", headers=planted).status_code == 401
        logout = client.post(
            "/logout",
            data={"csrf_token": csrf_of(jobs.text)},
            headers={**HTTPS, "Cookie": f"__Host-runlane_session={secret}"},
        )
        assert logout.status_code == 303
        (cleared,) = [c for c in logout.headers.get_list("set-cookie") if c.startswith("__Host-")]
        assert "max-age=0" in cleared.lower()
        assert "secure" in cleared.lower()
        again = {**HTTPS, "Cookie": f"__Host-runlane_session={secret}"}
        assert client.get("/jobs", headers=again).status_code == 303


def https_session(server: ApiServer, role: str, proto: str = "https") -> tuple[str, str]:
    """A session opened over HTTPS (`proto` as the proxy says it): its secret and a CSRF
    token of a page. The Cookie header is written by hand: httpx sends no Secure cookie to an
    http:// URL."""
    headers = {"X-Forwarded-Proto": proto}
    with browser(server) as client:
        form = client.get("/login", headers=headers)
        login_cookie = form.headers["set-cookie"].split(";")[0]
        answer = client.post(
            "/login",
            data={"token": server.tokens[role], "csrf_token": csrf_of(form.text)},
            headers={**headers, "Cookie": login_cookie},
        )
        assert answer.status_code == 303, answer.text
        (cookie,) = [
            c
            for c in answer.headers.get_list("set-cookie")
            if c.startswith("__Host-runlane_session=")
        ]
        secret = cookie.partition("=")[2].split(";")[0]
        page = client.get(
            "/jobs/single",
            headers={**headers, "Cookie": f"__Host-runlane_session={secret}"},
        )
        assert page.status_code == 200, page.text
        return secret, csrf_of(page.text)


def test_over_https_the_flash_cookie_is_a_secure_host_cookie(behind_tls: ApiServer) -> None:
    # The flash message of a form's answer rides in a cookie: over HTTPS it must be Secure
    # (and `__Host-`, as the session's is), or a plain-HTTP hop could read or plant it.
    secret, csrf = https_session(behind_tls, "operator")
    session = f"__Host-runlane_session={secret}"
    with browser(behind_tls) as client:
        paused = client.post(
            "/jobs/single/pause",
            data={"csrf_token": csrf, "reason": "upgrade"},
            headers={**HTTPS, "Cookie": session},
        )
        assert paused.status_code == 303, paused.text
        (flash,) = [c for c in paused.headers.get_list("set-cookie") if "runlane_flash=" in c]
        name, _, rest = flash.partition("=")
        assert name == "__Host-runlane_flash"
        flags = {part.strip().lower() for part in rest.split(";")[1:]}
        assert {"secure", "httponly", "samesite=strict", "path=/"} <= flags
        value = rest.split(";")[0]
        page = client.get(
            "/jobs/single", headers={**HTTPS, "Cookie": f"{session}; __Host-runlane_flash={value}"}
        )
        assert "Paused" in page.text  # the flash, read under its HTTPS name
        (cleared,) = [c for c in page.headers.get_list("set-cookie") if "runlane_flash=" in c]
        assert cleared.startswith("__Host-runlane_flash=")
        assert "max-age=0" in cleared.lower()
        assert "secure" in cleared.lower()  # else a browser refuses to clear a __Host- cookie
        # Over HTTPS a flash cookie without the prefix (another host's) is not shown.
        planted = client.get(
            "/jobs/single", headers={**HTTPS, "Cookie": f"{session}; runlane_flash=Planted"}
        )
        assert "Planted" not in planted.text
    with browser(behind_tls) as client:
        client.post(
            "/jobs/single/resume", data={"csrf_token": csrf}, headers={**HTTPS, "Cookie": session}
        )


def test_a_proxy_chains_forwarded_proto_list_is_read_by_its_first_element(
    behind_tls: ApiServer,
) -> None:
    # Behind two proxies X-Forwarded-Proto is a list, the client's scheme first: `https, http`
    # is a browser on HTTPS, and its cookies must be Secure.
    with browser(behind_tls) as client:
        form = client.get("/login", headers={"X-Forwarded-Proto": "https, http"})
        assert "secure" in form.headers["set-cookie"].lower()
        plain = client.get("/login", headers={"X-Forwarded-Proto": "http, https"})
        assert "secure" not in plain.headers["set-cookie"].lower()
    secret, _ = https_session(behind_tls, "viewer", proto="HTTPS ,http")
    assert secret


def test_a_forwarded_proto_list_from_an_untrusted_peer_is_ignored(web: ApiServer) -> None:
    with browser(web) as client:
        form = client.get("/login", headers={"X-Forwarded-Proto": "https, http"})
        assert "secure" not in form.headers["set-cookie"].lower()
