"""`render.run_rows`, the runs page's rows built as text: the same bytes as the Jinja macro it
replaced (kept here as the reference), and every value of a run escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from runlane.web import render
from runlane.web.render import run_rows, templates

# The macro of `_runs.html` that `run_rows` replaced, as it was.
REFERENCE = """\
{% for run in runs %}
<tr data-run-id="{{ run.id }}" data-queued-at="{{ run.queued_at.isoformat() }}">
  <th scope="row"><a href="/runs/{{ run.id }}" class="mono">{{ short_id(run.id) }}</a></th>
  <td><a href="/jobs/{{ run.job | urlencode }}">{{ run.job }}</a>{% if run.attempt > 1 %} <span class="count">attempt {{ run.attempt }}</span>{% endif %}</td>
  <td data-col="status">{{ status_badge(run.status) }}</td>
  <td>{{ run.trigger }}</td>
  <td>{% if run.requested_by %}{{ run.requested_by }}{% else %}<span class="none">—</span>{% endif %}</td>
  <td data-col="queued_at">{{ when(run.queued_at, zone) }}</td>
  <td data-col="started_at">{{ when(run.started_at, zone) }}</td>
  <td data-col="finished_at">{{ when(run.finished_at, zone) }}</td>
</tr>
{% endfor %}
"""
PAYLOAD = "<script>alert(1)</script>\"'&<img src=x onerror=alert(2)>"


def items() -> list[dict[str, Any]]:
    now = datetime(2026, 12, 2, 13, 45, 7, 123456, tzinfo=UTC)
    berlin = timezone(timedelta(hours=1))
    return [
        {
            "id": ["0f2c6d1e-aaaa-4bbb-8ccc-000000000001", PAYLOAD][i % 2],
            "job": ["nightly-etl", "a b&c/d", PAYLOAD][i % 3],
            "attempt": 1 + (i % 4 == 0),
            "requested_by": [PAYLOAD, None, "bob"][i % 3],
            "queued_at": now - timedelta(seconds=i, microseconds=i),
            "started_at": None if i % 5 == 0 else (now + timedelta(seconds=1)).astimezone(berlin),
            "finished_at": None if i % 2 else now.replace(tzinfo=None, microsecond=0),
            "status": ["success", "running", PAYLOAD][i % 3],
            "trigger": ["schedule", PAYLOAD][i % 2],
        }
        for i in range(12)
    ]


@pytest.mark.parametrize("zone", [None, "Europe/Berlin", 'a"<zone>'])
def test_run_rows_are_the_bytes_of_the_macro_they_replaced(zone: str | None) -> None:
    runs = items()
    expected = templates.from_string(REFERENCE).render(runs=runs, zone=zone)
    assert str(run_rows(runs, zone)) == expected


def test_every_value_of_a_run_is_inert_text() -> None:
    html = str(run_rows(items(), 'a"<zone>'))
    assert "<script>" not in html
    assert "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;" in html
    assert 'data-zone="a&#34;&lt;zone&gt;"' in html
    assert html.count("<tr ") == 12


def utc_items() -> list[dict[str, Any]]:
    """Rows as the store reads them (every time aware UTC): the ones `run_rows` caches."""
    now = datetime(2026, 12, 3, 9, 30, 1, 250000, tzinfo=UTC)
    return [
        {
            "id": f"0f2c6d1e-aaaa-4bbb-8ccc-{i:012d}",
            "job": ["nightly-etl", PAYLOAD][i % 2],
            "attempt": 1 + (i % 3 == 0),
            "requested_by": [None, "bob", PAYLOAD][i % 3],
            "queued_at": now - timedelta(minutes=i),
            "started_at": None if i % 4 == 0 else now - timedelta(minutes=i, seconds=-1),
            "finished_at": None if i % 2 else now - timedelta(minutes=i, seconds=-30),
            "status": ["running", "success"][i % 2],
            "trigger": "schedule",
        }
        for i in range(8)
    ]


@pytest.mark.parametrize("zone", [None, "Europe/Berlin"])
def test_a_cached_row_is_the_bytes_of_the_macro(zone: str | None) -> None:
    runs = utc_items()
    expected = templates.from_string(REFERENCE).render(runs=runs, zone=zone)
    first = str(run_rows(runs, zone))
    hits = render._cached_row.cache_info().hits
    again = str(run_rows(runs, zone))
    assert render._cached_row.cache_info().hits >= hits + len(runs)  # served from the cache
    assert first == again == expected


def test_a_changed_status_or_time_renders_the_new_value() -> None:
    runs = utc_items()[:1]
    run_rows(runs)  # cached as running, not finished
    done = datetime(2026, 12, 3, 9, 31, 0, tzinfo=UTC)
    changed = [{**runs[0], "status": "failure", "finished_at": done}]
    html = str(run_rows(changed))
    assert "status-failure" in html
    assert "status-running" not in html
    assert '<td data-col="finished_at"><time datetime="2026-12-03T09:31:00Z">' in html
    assert html == templates.from_string(REFERENCE).render(runs=changed, zone=None)
    renamed = [{**runs[0], "requested_by": "carol", "attempt": 3}]
    html = str(run_rows(renamed))
    assert "<td>carol</td>" in html
    assert "attempt 3" in html
    # The zone is part of the key: the same row in another zone carries that zone.
    assert 'data-zone="Asia/Tokyo"' in str(run_rows(runs, "Asia/Tokyo"))
    assert "data-zone" not in str(run_rows(runs))


def test_the_row_cache_is_bounded() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    many = [
        {
            "id": f"run-{i}",
            "job": "j",
            "attempt": 1,
            "requested_by": None,
            "queued_at": start + timedelta(seconds=i),
            "started_at": None,
            "finished_at": None,
            "status": "queued",
            "trigger": "cli",
        }
        for i in range(render.ROW_CACHE_SIZE + 500)
    ]
    html = str(run_rows(many))
    assert html.count("<tr ") == len(many)
    info = render._cached_row.cache_info()
    assert info.maxsize == render.ROW_CACHE_SIZE
    assert info.currsize <= render.ROW_CACHE_SIZE
