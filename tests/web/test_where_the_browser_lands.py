"""Where the browser lands: after following a link to the UI from another site (a chat
message, a mail, an alert's link), after posting a form of a page whose session has ended, and
when a page refuses its query.

Every cookie of the UI is `SameSite=Strict`: a browser does not send it on a navigation that
another site's page started, nor on any redirect of that navigation (Chromium, Firefox and
Safari alike). `from_another_site` follows a link as such a browser does: each hop of the
navigation without our cookies (the cookies it sets are kept), then a page that refreshes itself
(`<meta http-equiv="refresh">`) as a new navigation started by this site, which sends them.
"""

from __future__ import annotations

import html
import re
import urllib.parse

import httpx

from runlane.service.operations import sessions
from tests.api.conftest import ApiServer
from tests.web.conftest import browser, log_in, logged_in

CROSS_SITE = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"}
REFRESH = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]*)">')
LOGIN_FORM = 'action="/login"'


def from_another_site(web: ApiServer, client: httpx.Client, path: str) -> httpx.Response:
    """The page `client` (a browser) ends on after following a link to `path` on another
    site's page."""
    with browser(web) as hop:
        answer = hop.get(path, headers=CROSS_SITE)
        client.cookies.update(answer.cookies)
        for _ in range(5):
            if answer.status_code not in (301, 302, 303, 307, 308):
                break
            hop.cookies.clear()  # the same navigation: still no Strict cookie
            answer = hop.get(answer.headers["location"], headers=CROSS_SITE)
            client.cookies.update(answer.cookies)
    refresh = REFRESH.search(answer.text) if answer.status_code == 200 else None
    if refresh is not None:
        answer = client.get(html.unescape(refresh.group(1)), headers=SAME_ORIGIN)
    return answer


def test_a_login_link_opened_from_another_site_opens_the_jobs_page(web: ApiServer) -> None:
    link = web.call(lambda rt: sessions.create_login_link(rt, "operator"))
    with browser(web) as client:
        shown = from_another_site(web, client, f"/login?code={link.code}")
        assert shown.status_code == 200
        assert LOGIN_FORM not in shown.text  # not the login form, with the code spent
        assert "<h1>Jobs</h1>" in shown.text


def test_a_link_from_another_site_opens_its_page_in_a_live_session(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        shown = from_another_site(web, client, "/jobs/hello?at=now")
        assert shown.status_code == 200
        assert LOGIN_FORM not in shown.text
        assert "<h1>hello" in shown.text


def test_a_link_from_another_site_without_a_session_still_asks_to_log_in(
    web: ApiServer,
) -> None:
    with browser(web) as client:
        shown = from_another_site(web, client, "/jobs/hello")
        assert shown.status_code in (200, 303)
        if shown.status_code == 303:
            shown = client.get(shown.headers["location"])
        assert LOGIN_FORM in shown.text
        assert 'name="next" value="/jobs/hello"' in shown.text


def _next_of(answer: httpx.Response) -> str:
    assert answer.status_code == 303
    location = urllib.parse.urlsplit(answer.headers["location"])
    assert location.path == "/login"
    return urllib.parse.parse_qs(location.query)["next"][0]


def test_a_form_posted_after_its_session_ended_returns_to_its_page_after_login(
    web: ApiServer,
) -> None:
    with browser(web) as client:
        client.cookies.set("runlane_session", "the-secret-of-a-session-that-has-ended")
        posted = client.post(
            "/jobs/hello/pause",
            data={"csrf_token": "stale", "reason": "late"},
            headers={"Referer": f"{web.base_url}/jobs/hello"},
        )
        target = _next_of(posted)
        answer = log_in(client, web.tokens["operator"], next_path=target)
        assert answer.status_code == 303
        page = client.get(answer.headers["location"])
        # The page the form was on, not its action (which answers a GET with a JSON 405).
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "<h1>hello" in page.text


def test_a_post_without_a_referer_of_this_site_returns_to_the_jobs_page(web: ApiServer) -> None:
    with browser(web) as client:
        for headers in ({}, {"Referer": "https://elsewhere.example/jobs/hello"}):
            posted = client.post("/runs/abc123/cancel", data={}, headers=headers)
            assert _next_of(posted) == "/jobs"


def test_a_query_parameter_refused_by_a_page_is_a_page(web: ApiServer) -> None:
    with logged_in(web, "viewer") as client:
        for path in ("/schedule?days=99", "/jobs?q=" + "x" * 201, "/events?key=" + "k" * 201):
            answer = client.get(path)
            assert answer.status_code == 422
            assert answer.headers["content-type"].startswith("text/html"), path
            assert "<code>invalid_argument</code>" in answer.text


def test_a_login_links_next_with_a_tab_does_not_leave_the_site(web: ApiServer) -> None:
    # A browser's URL parser drops tabs and newlines, so `/<TAB>/evil.example` is
    # `//evil.example`: another site. The page that goes on after the link's login must not
    # name it (its meta refresh and link are followed as the browser parses them).
    for trick in ("/\t/evil.example/", "/\n/evil.example/", "/\r/evil.example/"):
        link = web.call(lambda rt: sessions.create_login_link(rt, "operator"))
        with browser(web) as client:
            query = urllib.parse.urlencode({"code": link.code, "next": trick})
            answer = client.get(f"/login?{query}", headers=CROSS_SITE)
            assert answer.status_code == 200
            refresh = REFRESH.search(answer.text)
            assert refresh is not None
            assert html.unescape(refresh.group(1)) == "/jobs", repr(trick)
