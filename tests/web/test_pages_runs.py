"""The runs pages through the real server (SQLite and PostgreSQL) on seeded data: the list with
its filters and keyset pages, a run with every field, its attempts, its error explained, the
tail of a 100 MB log and its live follow, Cancel (and its refusal for a viewer), escaping."""

from __future__ import annotations

import html
import re
import time
import urllib.parse
from pathlib import Path

import pytest

from runlane.core.access import Role
from runlane.core.runs import RunStatus, Trigger
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.web.render import asset
from tests.api.test_endpoints import audit_rows
from tests.web.conftest import csrf_of, logged_in
from tests.web.pages_seed import SCRIPT, Seeded, seeded

__all__ = ["seeded"]  # the module fixture the tests below take

ROW = re.compile(r'<tr data-run-id="([0-9a-f-]{36})"')
TIME = re.compile(r"<time [^>]*>([^<]*)</time>")


def run_ids(html: str) -> list[str]:
    return ROW.findall(html)


def status_of(seeded: Seeded, run_id: str) -> RunStatus:
    return seeded.server.call(lambda rt: operations.show_run(rt, run_id)).status


def test_the_runs_page_lists_every_status_with_labelled_times(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/runs")
    assert r.status_code == 200
    ids = run_ids(r.text)
    for what in ("shout", "boom", "slow", "flaky", "cancelled", "running", "queued"):
        assert seeded.runs[what] in ids, what
    for status in ("success", "failure", "timeout", "cancelled", "running", "queued", "skipped"):
        assert f'class="badge status-{status}"' in r.text, status
    times = TIME.findall(r.text)
    assert times
    assert all(t.endswith(" UTC") for t in times)
    # The live update reads the API's basic view: no params, notes or saved log tails.
    assert 'data-live-url="/api/v1/runs?limit=50&amp;view=basic"' in r.text
    assert f'<script src="{asset("runs.js")}" defer></script>' in r.text
    assert "Older runs" not in r.text  # one page holds them all


def test_filters_are_get_parameters_through_the_operation(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        failed = c.get("/runs", params={"status": "failure"})
        boom = c.get("/runs", params={"job": "boom", "trigger": "chain"})
        alice = c.get("/runs", params={"requested_by": "alice", "status": "timeout"})
        future = c.get("/runs", params={"since": "now+1d"})
        blank = c.get("/runs", params={"job": "", "status": ""})
        bad = c.get("/runs", params={"status": "bogus"})
    failures = run_ids(failed.text)
    assert seeded.runs["boom"] in failures
    assert seeded.runs["shout"] not in failures
    assert 'class="badge status-success"' not in failed.text
    # boom ran twice: once by alice (cli) and once as the chain's second step.
    chain_boom = run_ids(boom.text)
    assert len(chain_boom) == 1
    assert seeded.runs["boom"] not in chain_boom
    assert run_ids(alice.text) == [seeded.runs["slow"]]
    assert run_ids(future.text) == []
    assert "No run matches." in future.text
    assert len(run_ids(blank.text)) > 5
    assert bad.status_code == 422
    assert "invalid_argument" in bad.text
    assert "bogus" in bad.text
    # The live update asks the API for what the page shows: same filters.
    live = re.search(r'data-live-url="([^"]+)"', failed.text)
    assert live is not None
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(html.unescape(live.group(1))).query) == {
        "status": ["failure"],
        "limit": ["50"],
        "view": ["basic"],
    }


def test_the_query_is_read_as_fastapi_read_it_and_refused_as_a_page(seeded: Seeded) -> None:
    """The page reads its query itself (`runs._query_filters`): the last of repeated values,
    and an over-long or unstorable filter is an error page (422, HTML), not a traceback."""
    with logged_in(seeded.server, "viewer") as c:
        repeated = c.get("/runs?status=success&status=failure")
        long = c.get("/runs", params={"job": "j" * 201})
        long_cursor = c.get("/runs", params={"cursor": "c" * 401})
        nul = c.get("/runs?requested_by=%00")
    assert repeated.status_code == 200
    assert seeded.runs["boom"] in run_ids(repeated.text)
    assert 'class="badge status-success"' not in repeated.text
    for refused, name in ((long, "job"), (long_cursor, "cursor"), (nul, "requested_by")):
        assert refused.status_code == 422, name
        assert refused.headers["content-type"].startswith("text/html"), name
        assert "invalid_argument" in refused.text, name
        assert f"parameter &#39;{name}&#39;" in refused.text, name


def test_older_runs_walks_the_keyset_pages(seeded: Seeded) -> None:
    pager = Requester("pager", Trigger.CLI)
    made = [
        seeded.server.call(lambda rt: operations.run_job(rt, "etl.load", requester=pager)).run.id
        for _ in range(57)
    ]
    seen: list[str] = []
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/runs", params={"requested_by": "pager"})
        seen += run_ids(r.text)
        older = re.search(r'<a href="([^"]+)" rel="next">Older runs</a>', r.text)
        assert older is not None
        link = html.unescape(older.group(1))
        assert "cursor=" in link
        assert "requested_by=pager" in link
        second = c.get(link)
        assert 'rel="next"' not in second.text  # the last page
        assert "data-live-url" not in second.text  # history: nothing new arrives in it
        assert "Newest runs" in second.text
        seen += run_ids(second.text)
    assert len(seen) == 57
    assert sorted(seen) == sorted(made)
    assert len(run_ids(r.text)) == 50


def test_a_run_shows_every_field_and_its_error_in_words(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        boom = c.get(f"/runs/{seeded.runs['boom'][:8]}")
        slow = c.get(f"/runs/{seeded.runs['slow']}")
        missing = c.get("/runs/" + "f" * 32)
    assert boom.status_code == 200
    text = boom.text
    assert seeded.runs["boom"] in text
    assert "<code>exit_code</code> The command exited with a non-zero exit code" in text
    assert "<dt>Exit code</dt><dd>3</dd>" in text
    assert "going down" in text  # the log tail
    assert "<dt>Requested by</dt><dd>alice</dd>" in text
    assert "<dt>Ran for</dt>" in text
    assert "Cancel run" not in text  # final: nothing to cancel
    assert "data-follow-url" not in text
    assert "The run has ended." in text
    assert "<code>deadline</code> The run passed its deadline" in slow.text
    assert missing.status_code == 404
    assert "unknown_run" in missing.text


def test_the_attempt_chain_links_both_ways(seeded: Seeded) -> None:
    first, retry = seeded.runs["flaky"], seeded.runs["flaky_retry"]
    with logged_in(seeded.server, "viewer") as c:
        one = c.get(f"/runs/{first}")
        two = c.get(f"/runs/{retry}")
    assert f'<a href="/runs/{retry}">attempt 2' in one.text
    assert f'<a href="/runs/{first}">attempt 1' in two.text
    assert "<dt>Attempt</dt><dd>2 of 2</dd>" in two.text


def test_the_job_page_lists_its_recent_runs(seeded: Seeded) -> None:
    """A job's page lists its latest runs, newest first (the run list's basic view): each
    linked by its short id with its attempt, status, trigger and labelled times; nothing of
    their output (which only a run's own page shows)."""
    first, retry = seeded.runs["flaky"], seeded.runs["flaky_retry"]
    with logged_in(seeded.server, "viewer") as c:
        flaky = c.get("/jobs/flaky")
        boom = c.get("/jobs/boom")
    assert flaky.status_code == boom.status_code == 200
    rows = re.findall(r'<a href="/runs/([0-9a-f-]+)"><code>', flaky.text)
    assert rows == [retry, first]
    assert f'<code>{retry[:8]}</code></a> <span class="type">attempt 2</span>' in flaky.text
    assert 'class="badge status-success"' in flaky.text
    assert 'class="badge status-failure"' in flaky.text
    assert 'href="/runs?job=flaky"' in flaky.text
    assert re.search(r'<a href="/runs/[0-9a-f-]+"><code>', boom.text)
    assert "going down" not in boom.text  # the run's output is on its own page


def test_output_with_html_is_escaped(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get(f"/runs/{seeded.runs['shout']}")
    assert "&lt;script&gt;alert(&#39;out&#39;)&lt;/script&gt;" in r.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in r.text
    assert SCRIPT not in r.text
    assert "<img" not in r.text


def test_the_tail_of_a_100_mb_log_and_its_live_follow(seeded: Seeded) -> None:
    run_id = seeded.runs["running"]
    assert seeded.big_log_size > 100 * 1024 * 1024
    with logged_in(seeded.server, "viewer") as c:
        started = time.perf_counter()
        r = c.get(f"/runs/{run_id}")
        took = time.perf_counter() - started
        assert r.status_code == 200
        assert took < 2.0, f"the run page of a 100 MB log took {took:.2f} s"
        assert re.search(r"[\d,]+ bytes earlier not shown", r.text)
        assert "the last whole line\nhalf a li</pre>" in r.text
        assert "&lt;script&gt;" in r.text
        assert '<dt>Process id</dt><dd><span class="mono">4242</span></dd>' in r.text
        follow = re.search(r'data-follow-url="([^"]+)"', r.text)
        assert follow is not None
        url = html.unescape(follow.group(1))
        assert f"after={seeded.big_log_size}" in url
        assert 'data-line-open="1"' in r.text
        assert f'<script src="{asset("log.js")}" defer></script>' in r.text
        # The follow, with the session cookie, sends what is written after the tail, and only it.
        log = Path(seeded.server.runtime.settings.log_dir) / f"{run_id}.1.log"
        with c.stream("GET", url, timeout=30) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            written = time.perf_counter()
            with log.open("ab") as fh:
                fh.write(b"ne\na new line\n")
            data = ""
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    data += line.removeprefix("data: ") + "\n"
                if line == "" and data:
                    break
            arrived = time.perf_counter() - written
    assert data == "ne\na new line\n"
    assert arrived < 5.0


def test_an_operator_cancels_and_a_viewer_cannot(seeded: Seeded) -> None:
    target = seeded.server.call(
        lambda rt: operations.run_job(rt, "etl.load", requester=Requester("c", Trigger.CLI))
    ).run.id
    before = len(audit_rows(seeded.server, "cancel"))
    with logged_in(seeded.server, "viewer") as viewer:
        page = viewer.get(f"/runs/{target}")
        assert "Cancel run" not in page.text
        forged = viewer.post(f"/runs/{target}/cancel", data={"csrf_token": csrf_of(page.text)})
    assert forged.status_code == 403
    assert "forbidden" in forged.text
    assert status_of(seeded, target) is RunStatus.QUEUED
    with logged_in(seeded.server, "operator") as operator:
        page = operator.get(f"/runs/{target}")
        assert '<button type="submit">Cancel run</button>' in page.text
        no_csrf = operator.post(f"/runs/{target}/cancel", data={})
        assert no_csrf.status_code == 403
        assert status_of(seeded, target) is RunStatus.QUEUED
        done = operator.post(f"/runs/{target}/cancel", data={"csrf_token": csrf_of(page.text)})
        assert done.status_code == 303
        assert done.headers["location"] == f"/runs/{target}"
        again = operator.post(f"/runs/{target}/cancel", data={"csrf_token": csrf_of(page.text)})
    assert status_of(seeded, target) is RunStatus.CANCELLED
    assert again.status_code == 409
    assert "not_cancellable" in again.text
    rows = audit_rows(seeded.server, "cancel")
    assert len(rows) == before + 3  # the viewer's refusal, the cancel, the refused second one
    outcomes = [r.outcome for r in rows[-3:]]
    assert "forbidden" in outcomes
    assert "ok" in outcomes


def test_the_live_list_reads_the_api_with_the_session_cookie(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/api/v1/runs", params={"limit": 50, "status": "running"})
    assert r.status_code == 200
    assert [run["id"] for run in r.json()["items"]] == [seeded.runs["running"]]


def test_a_followed_log_ends_when_the_sessions_token_is_revoked(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live log's stream checks the session as often as a keep-alive goes out: once its
    token is revoked (which ends its sessions), the stream ends with an `error` event."""
    from runlane.api.routes import logs

    monkeypatch.setattr(logs, "KEEPALIVE_SECONDS", 0.05)
    made = seeded.server.call(
        lambda rt: operations.create_token(
            rt, "streamer", role=Role.VIEWER, requester=Requester(None, Trigger.CLI)
        )
    )
    url = f"/api/v1/runs/{seeded.runs['running']}/logs"
    with logged_in(seeded.server, secret=made.secret) as c:
        params = {"follow": "true", "after": seeded.big_log_size + 10**6}
        with c.stream("GET", url, params=params, timeout=30) as stream:
            assert stream.status_code == 200
            seeded.server.call(
                lambda rt: operations.revoke_token(
                    rt, "streamer", requester=Requester(None, Trigger.CLI)
                )
            )
            text = ""
            deadline = time.perf_counter() + 20
            for chunk in stream.iter_text():  # to its end: the server closes it
                text += chunk
                if time.perf_counter() > deadline:
                    break  # keep-alives would go on for ever: the asserts below fail
    assert "event: error" in text
    assert '"code":"unauthenticated"' in text
    assert "event: end" not in text
