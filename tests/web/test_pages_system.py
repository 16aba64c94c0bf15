"""The events, launchers and schedule pages through the real server (SQLite and PostgreSQL) on
seeded data: recent events with their runs and escaped data, listeners, Emit event (with the
typed key for a listener that acts, refused for a viewer), the launchers' state and a changed
catalog's warning, and the schedule's slots labelled with their zones."""

from __future__ import annotations

import re

from runlane.core.records import Heartbeat
from runlane.service import operations
from tests.api.test_endpoints import audit_rows
from tests.web.conftest import csrf_of, logged_in
from tests.web.pages_seed import SCRIPT, Seeded, seeded

__all__ = ["seeded"]


def runs_of(seeded: Seeded, job: str) -> list[str]:
    return [r.id for r in seeded.server.call(lambda rt: operations.list_runs(rt, job=job))]


def test_events_show_their_runs_escaped_data_and_listeners(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/events")
        greet = c.get("/events", params={"key": "greet"})
        other = c.get("/events", params={"key": "nothing.here"})
    assert r.status_code == 200
    assert f'<a href="/runs/{seeded.runs["event"]}">hello' in r.text
    assert "started" in r.text
    assert SCRIPT not in r.text
    assert "&lt;script&gt;" in r.text
    assert "<code>greet</code>" in r.text  # the listeners
    assert "<code>launch.now</code>" in r.text
    assert "Emit event" not in r.text  # a viewer
    assert seeded.runs["event"] in greet.text
    assert "No event recorded with this key." in other.text


def test_emit_event_for_an_operator_and_its_confirmation(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as viewer:
        token = csrf_of(viewer.get("/events").text)
        forged = viewer.post("/events", data={"csrf_token": token, "key": "greet"})
    assert forged.status_code == 403
    before = len(runs_of(seeded, "careful"))
    with logged_in(seeded.server, "operator") as c:
        page = c.get("/events")
        assert '<button type="submit">Emit event</button>' in page.text
        token = csrf_of(page.text)
        emitted = c.post("/events", data={"csrf_token": token, "key": "greet", "data": '{"a": 1}'})
        assert emitted.status_code == 303
        assert emitted.headers["location"] == "/events?key=greet"
        bad = c.post("/events", data={"csrf_token": token, "key": "greet", "data": "[1"})
        assert bad.status_code == 422
        assert "invalid_argument" in bad.text
        assert "data is not JSON" in bad.text
        # What no event can record is `bad_event`, as the API, MCP and the CLI say.
        for form in ({"key": " "}, {"key": "greet", "data": '{"a": NaN}'}):
            unrecordable = c.post("/events", data={"csrf_token": token, **form})
            assert unrecordable.status_code == 422
            assert "bad_event" in unrecordable.text, form
        asked = c.post("/events", data={"csrf_token": token, "key": "launch.now"})
        assert asked.status_code == 200
        assert "Type the event's key" in asked.text
        assert '<button type="submit">Confirm</button>' in asked.text
        assert len(runs_of(seeded, "careful")) == before
        wrong = c.post(
            "/events", data={"csrf_token": token, "key": "launch.now", "confirm": "greet"}
        )
        assert wrong.status_code == 422
        assert len(runs_of(seeded, "careful")) == before
        right = c.post(
            "/events", data={"csrf_token": token, "key": "launch.now", "confirm": "launch.now"}
        )
    assert right.status_code == 303
    assert len(runs_of(seeded, "careful")) == before + 1
    assert any(e.target == "greet" and e.outcome == "ok" for e in audit_rows(seeded.server, "emit"))
    assert any(e.outcome == "forbidden" for e in audit_rows(seeded.server, "emit"))


def test_launchers_show_their_state_and_a_changed_catalog(seeded: Seeded) -> None:
    now = seeded.server.call(lambda rt: rt.store.now())
    beat = Heartbeat(
        launcher_id="web-test-launcher",
        host="elsewhere",
        pid=77,
        version="9.9.9",
        started_at=now,
        beat_at=now,
        queue_depth=3,
        running={"inline": 2, "pod": 1},
        catalog_digest="sha256:" + "0" * 64,
        catalog_loaded_at=now,
        heartbeat_interval=3600.0,
    )
    seeded.server.call(lambda rt: rt.store.beat(beat))
    try:
        with logged_in(seeded.server, "viewer") as c:
            r = c.get("/launchers")
    finally:
        seeded.server.call(lambda rt: rt.store.remove_launcher("web-test-launcher"))
    assert r.status_code == 200
    row = r.text[r.text.index('<th scope="row" class="mono">web-test-launcher') :]
    row = row[: row.index("</tr>")]
    assert "elsewhere" in row
    assert "9.9.9" in row
    assert 'class="badge status-success">live' in row
    assert "differs from the file" in row
    assert re.search(r"<td>\d", row)  # the queue depth…
    assert "launcher_catalog_changed" in r.text  # … and the warning above the table
    assert "queued" in r.text


def test_the_schedule_shows_the_next_slots_in_their_zones(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/schedule")
        week = c.get("/schedule", params={"days": 7})
        bad = c.get("/schedule", params={"days": 0})
    assert r.status_code == 200
    assert "America/New_York</time>" in r.text
    assert "Europe/Berlin</time>" in r.text
    rows = r.text.count("<tr class=")
    assert 40 <= rows <= 60  # two days of an hourly schedule and a daily one
    assert week.text.count("<tr class=") > rows
    assert bad.status_code == 422


def test_a_paused_job_shows_its_slots_held(seeded: Seeded) -> None:
    seeded.server.call(
        lambda rt: operations.pause_job(
            rt, "hello", requester=operations.Requester(None), reason="web test"
        )
    )
    try:
        with logged_in(seeded.server, "viewer") as c:
            r = c.get("/schedule", params={"days": 1})
    finally:
        seeded.server.call(
            lambda rt: operations.resume_job(rt, "hello", requester=operations.Requester(None))
        )
    assert "no: paused" in r.text
