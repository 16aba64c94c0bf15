"""The jobs and job pages through the real server: headers, roles, CSRF, runs with typed
params, the `acts` confirmation, pause/snooze/resume, explain, and escaping."""

from __future__ import annotations

import hashlib
import re

import httpx

from runlane.ports import RunFilter
from runlane.service import operations
from runlane.web.render import asset
from tests.api.conftest import ApiServer
from tests.web.conftest import browser, csrf_of, logged_in

RUN_LOCATION = re.compile(r"^/runs/([0-9a-f-]{36})$")


def runs_of(web: ApiServer, job: str) -> list[object]:
    return web.call(lambda rt: rt.store.list_runs(RunFilter(job=job, limit=100)))


def test_pages_carry_the_csp_and_no_store(web: ApiServer) -> None:
    with logged_in(web, "viewer") as client:
        for path in ("/jobs", "/jobs/hello", "/login"):
            answer = client.get(path)
            assert answer.status_code == 200, path
            csp = answer.headers["content-security-policy"]
            assert "script-src 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert answer.headers["cache-control"] == "no-store"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "same-origin"
            assert "<script>" not in answer.text  # only <script src=...>
            assert " style=" not in answer.text
        static = client.get("/static/app.js")
        assert static.status_code == 200
        assert "javascript" in static.headers["content-type"]


def test_static_files_are_linked_by_version_and_cached_for_good(web: ApiServer) -> None:
    """A page links each file with a hash of its content, which the browser may keep for good
    (a run page opened in a new tab paints without asking again); the bare URL revalidates."""
    with logged_in(web, "viewer") as client:
        page = client.get("/jobs").text
        for name in ("app.css", "app.js"):
            url = asset(name)
            assert re.fullmatch(rf"/static/{re.escape(name)}\?v=[0-9a-f]{{12}}", url)
            assert f'"{url}"' in page
            versioned = client.get(url)
            assert versioned.status_code == 200
            assert versioned.headers["cache-control"] == "public, max-age=31536000, immutable"
            bare = client.get(f"/static/{name}")
            assert bare.headers["cache-control"] == "no-cache"
            assert bare.content == versioned.content
            assert hashlib.sha256(bare.content).hexdigest().startswith(url.rsplit("=", 1)[1])


def test_the_jobs_page_lists_every_job_with_schedules_and_zones(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        page = client.get("/jobs").text
    for job in ("hello", "typed", "careful", "single", "etl.load", "etl.clean"):
        assert f'href="/jobs/{job}"' in page
    assert "<code>0 * * * *</code>" in page
    assert "Europe/Berlin" in page  # the catalog's default zone for hello's first schedule
    assert "America/New_York" in page
    # every next slot twice: in the schedule's zone, and as UTC for the viewer's switch
    assert re.search(r'<time datetime="[0-9T:-]+Z" data-fixed="1">[0-9 :-]+ America/New_York', page)
    assert re.search(
        r'<time datetime="[0-9T:-]+Z" data-zone="America/New_York">[0-9 :-]+ UTC', page
    )
    assert page.count(">Run</button>") == 6


def test_a_viewer_sees_no_run_button_and_a_forged_post_is_refused(web: ApiServer) -> None:
    before = len(runs_of(web, "hello"))
    with logged_in(web, "viewer") as client:
        jobs = client.get("/jobs")
        assert ">Run</button>" not in jobs.text
        job = client.get("/jobs/hello")
        assert ">Run</button>" not in job.text
        assert ">Pause</button>" not in job.text
        forged = client.post("/jobs/hello/run", data={"csrf_token": csrf_of(jobs.text)})
        assert forged.status_code == 403
        assert "forbidden" in forged.text
        assert (
            client.post("/jobs/hello/pause", data={"csrf_token": csrf_of(jobs.text)}).status_code
            == 403
        )
    assert len(runs_of(web, "hello")) == before


def test_a_scoped_operator_may_run_only_its_jobs(web: ApiServer) -> None:
    with logged_in(web, "etl") as client:
        page = client.get("/jobs").text
        assert page.count(">Run</button>") == 2  # etl.load, etl.clean
        refused = client.post("/jobs/hello/run", data={"csrf_token": csrf_of(page)})
        assert refused.status_code == 403


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(web: ApiServer) -> None:
    before = len(runs_of(web, "hello"))
    with logged_in(web, "operator") as client:
        assert client.post("/jobs/hello/run").status_code == 403
        wrong = client.post("/jobs/hello/run", data={"csrf_token": "0" * 64})
        assert wrong.status_code == 403
        assert "csrf_refused" in wrong.text
        assert client.post("/logout", data={"csrf_token": "nope"}).status_code == 403
        assert client.get("/jobs").status_code == 200  # still logged in
    with logged_in(web, "admin") as other:  # another session's token is wrong too
        theirs = csrf_of(other.get("/jobs").text)
    with logged_in(web, "operator") as client:
        assert client.post("/jobs/hello/run", data={"csrf_token": theirs}).status_code == 403
    assert len(runs_of(web, "hello")) == before


def test_a_csrf_token_that_is_not_ascii_is_refused_not_a_500(web: ApiServer) -> None:
    before = len(runs_of(web, "hello"))
    with logged_in(web, "operator") as client:
        wrong = client.post("/jobs/hello/run", data={"csrf_token": "é" * 64})
        assert wrong.status_code == 403
        assert "csrf_refused" in wrong.text
    with browser(web) as client:
        client.get("/login")  # its double-submit cookie
        login = client.post("/login", data={"token": web.tokens["viewer"], "csrf_token": "é"})
        assert login.status_code == 403
        assert "csrf_refused" in login.text
    assert len(runs_of(web, "hello")) == before


def test_the_login_form_is_protected_too(web: ApiServer) -> None:
    with browser(web) as client:
        form = client.get("/login")
        token = csrf_of(form.text)
        no_field = client.post("/login", data={"token": web.tokens["viewer"]})
        assert no_field.status_code == 403
        cross = client.post(
            "/login",
            data={"token": web.tokens["viewer"], "csrf_token": token},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        assert cross.status_code == 403
        other_origin = client.post(
            "/login",
            data={"token": web.tokens["viewer"], "csrf_token": token},
            headers={"Origin": "https://evil.example"},
        )
        assert other_origin.status_code == 403
        assert "runlane_session" not in client.cookies


def test_a_run_with_typed_params_creates_the_run(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        page = client.get("/jobs/typed")
        text = page.text
        assert 'name="param_count" type="number" step="1"' in text
        assert re.search(r'name="param_count" type="number" step="1" value=""\s+required', text)
        assert 'name="param_ratio" type="number" step="any"' in text
        assert '<select id="param-3" name="param_mode">' in text  # choice → select
        assert "<option>fast</option>" in text
        assert "optional" in text
        answer = client.post(
            "/jobs/typed/run",
            data={
                "csrf_token": csrf_of(text),
                "param_count": "3",
                "param_label": "",
                "param_mode": "slow",
                "param_ratio": "0.5",
                "param_dry": "true",
            },
        )
        assert answer.status_code == 303, answer.text
        found = RUN_LOCATION.match(answer.headers["location"])
        assert found is not None
        run = web.call(lambda rt: rt.store.get_run(found.group(1)))
        assert run.params == {"count": 3, "mode": "slow", "ratio": 0.5, "dry": True}
        assert run.trigger == "manual"
        assert run.requested_by == "operator"
        # the flash message of the redirect
        bad = client.post(
            "/jobs/typed/run", data={"csrf_token": csrf_of(text), "param_count": "three"}
        )
        assert bad.status_code == 422
        assert "param_invalid" in bad.text
        assert 'value="three"' in bad.text  # what the person typed is shown again


def test_an_acts_job_starts_only_when_its_name_is_typed(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        token = csrf_of(client.get("/jobs/careful").text)
        asked = client.post("/jobs/careful/run", data={"csrf_token": token})
        assert asked.status_code == 200
        assert ">Confirm</button>" in asked.text
        assert 'name="confirm"' in asked.text
        assert runs_of(web, "careful") == []  # dismissing (not posting again) starts nothing
        wrong = client.post("/jobs/careful/run", data={"csrf_token": token, "confirm": "carefull"})
        assert wrong.status_code == 422
        assert "confirmation_required" in wrong.text
        assert runs_of(web, "careful") == []
        done = client.post("/jobs/careful/run", data={"csrf_token": token, "confirm": "careful"})
        assert done.status_code == 303
        assert len(runs_of(web, "careful")) == 1


def test_pause_snooze_and_resume(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        token = csrf_of(client.get("/jobs/single").text)
        paused = client.post(
            "/jobs/single/pause", data={"csrf_token": token, "reason": "db <b>upgrade</b>"}
        )
        assert paused.status_code == 303
        page = client.get("/jobs/single").text
        assert "Paused" in page  # the flash
        assert ">paused</span>" in page
        assert "db &lt;b&gt;upgrade&lt;/b&gt;" in page
        assert ">Resume</button>" in page
        snoozed = client.post(
            "/jobs/single/pause",
            data={"csrf_token": token, "until": "2999-01-02T03:04", "reason": "later"},
        )
        assert snoozed.status_code == 303
        page = client.get("/jobs/single").text
        assert ">snoozed</span>" in page
        assert '<time datetime="2999-01-02T03:04:00Z">2999-01-02 03:04 UTC</time>' in page
        past = client.post(
            "/jobs/single/pause", data={"csrf_token": token, "until": "2001-01-01T00:00"}
        )
        assert past.status_code == 422
        assert "invalid_argument" in past.text
        # CPython's ISO parser stops at a NUL: the time before it was taken.
        garbled = client.post(
            "/jobs/single/pause", data={"csrf_token": token, "until": "2999-01-01T00:00\x00"}
        )
        assert garbled.status_code == 422
        assert "is not a time" in garbled.text
        resumed = client.post("/jobs/single/resume", data={"csrf_token": token})
        assert resumed.status_code == 303
        page = client.get("/jobs/single").text
        assert ">snoozed</span>" not in page
        assert ">Resume</button>" not in page
    overrides = web.call(lambda rt: rt.store.overrides())
    assert "single" not in overrides


def test_pause_and_resume_are_audited_under_the_operations_names(web: ApiServer) -> None:
    # The audit's `action` is the operation (docs/access.md), whichever face called it: the
    # API and MCP record `pause_job` and `resume_job`, and so does the UI.
    with logged_in(web, "operator") as client:
        token = csrf_of(client.get("/jobs/etl.clean").text)
        assert client.post("/jobs/etl.clean/pause", data={"csrf_token": token}).status_code == 303
        assert client.post("/jobs/etl.clean/resume", data={"csrf_token": token}).status_code == 303
    entries = web.call(lambda rt: operations.list_audit(rt, limit=2)).items
    assert [(e.action, e.target, e.actor) for e in entries] == [
        ("resume_job", "etl.clean", "operator"),
        ("pause_job", "etl.clean", "operator"),
    ]


def test_explain_says_why_a_slot_did_what_it_did(web: ApiServer) -> None:
    with logged_in(web, "viewer") as client:
        answer = client.get("/jobs/hello", params={"at": "2026-12-01T10:30"})
        assert answer.status_code == 200
        assert 'class="explained"' in answer.text
        assert '<time datetime="2026-12-01T10:00:00Z"' in answer.text  # the hourly slot
        bad = client.get("/jobs/hello", params={"at": "yesterday-ish"})
        assert bad.status_code == 422
        assert "invalid_argument" in bad.text


def test_an_unknown_job_is_a_404_page(web: ApiServer) -> None:
    with logged_in(web, "viewer") as client:
        answer = client.get("/jobs/helo")
        assert answer.status_code == 404
        assert "unknown_job" in answer.text
        assert answer.headers["content-type"].startswith("text/html")


def test_a_script_param_value_renders_as_inert_text(web: ApiServer) -> None:
    payload = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    with logged_in(web, "operator") as client:
        token = csrf_of(client.get("/jobs/typed").text)
        answer = client.post(
            "/jobs/typed/run",
            data={"csrf_token": token, "param_count": "1", "param_label": payload},
        )
        assert answer.status_code == 303
        refused = client.post(
            "/jobs/typed/run",
            data={"csrf_token": token, "param_count": "x", "param_label": payload},
        )
        assert refused.status_code == 422
    text = refused.text  # the form shows the typed value again
    assert "<script>alert" not in text
    assert "<img src=x" not in text
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in text
    )


def test_the_api_reads_with_the_session_cookie_but_never_writes(web: ApiServer) -> None:
    with logged_in(web, "operator") as client:
        assert client.get("/api/v1/jobs").status_code == 200
        write = client.post("/api/v1/jobs/hello/runs", json={})
        assert write.status_code == 401
    with httpx.Client(base_url=web.base_url) as anonymous:
        assert anonymous.get("/api/v1/jobs").status_code == 401
