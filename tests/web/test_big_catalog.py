"""The jobs page of a catalog of 5,000 scheduled jobs: it pages, filters, and stays small
(the figures are bench material; here only that it renders and its size is bounded)."""

from __future__ import annotations

import contextlib
import gzip
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from runlane.core.runs import Trigger
from runlane.service import operations
from runlane.service.operations import Requester
from tests.api.conftest import ApiServer, api_settings, running_api
from tests.web.conftest import logged_in

JOBS = 5000
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo")


def big_catalog(path: Path) -> Path:
    lines = [
        "version: 1",
        "global: {max_deadline: 1h, manual_queue_ttl: 1h, timezone: UTC}",
        "defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}",
        "jobs:",
    ]
    for i in range(JOBS):
        lines.append(f"  job-{i:05d}:")
        lines.append(f"    command: [{sys.executable}, -c, pass]")
        lines.append(f'    schedules: [{{cron: "{i % 60} * * * *", tz: {ZONES[i % 4]}}}]')
        if i % 3 == 0:
            lines.append("    params: {week: int?}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    tmp = tmp_path_factory.mktemp("web-big")
    settings = replace(
        api_settings(tmp, f"sqlite:///{tmp / 'runlane.db'}"),
        catalog_path=str(big_catalog(tmp / "big.yaml")),
    )
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_api(settings, "sqlite"))
        someone = Requester("seed", Trigger.CLI)
        for i in range(0, 300, 7):  # some jobs have runs
            server.call(lambda rt, i=i: operations.run_job(rt, f"job-{i:05d}", requester=someone))
        yield server


def test_the_jobs_page_of_5000_jobs_pages_and_stays_small(big: ApiServer) -> None:
    with logged_in(big, "operator") as client:
        first = client.get("/jobs", headers={"Accept-Encoding": "gzip"})
        assert first.status_code == 200
        assert first.headers["content-encoding"] == "gzip"
        text = first.text
        assert "5000 jobs" in text
        assert "page 1 of 50" in text
        assert text.count("<tr>") == 101  # the header and 100 jobs
        assert 'href="/jobs/job-00000"' in text
        assert 'href="/jobs/job-00099"' in text
        assert 'href="/jobs/job-00100"' not in text
        assert 'rel="next"' in text
        assert "status-queued" in text  # job-00000's run: one read for the latest runs
        assert len(gzip.compress(first.content)) <= 60 * 1024
        last = client.get("/jobs", params={"page": 50}).text
        assert 'href="/jobs/job-04999"' in last
        assert 'rel="next"' not in last
        found = client.get("/jobs", params={"q": "JOB-0421"}).text
        assert "10 jobs" in found
        empty = client.get("/jobs", params={"q": "nothing"})
        assert empty.status_code == 200
        assert "No job matches." in empty.text


def test_the_jobs_page_answers_in_bounded_time(big: ApiServer) -> None:
    """A loose bound (a shared CI machine): the page's figure is measured by bench scripts."""
    with logged_in(big, "viewer") as client:
        client.get("/jobs")  # warm
        started = time.perf_counter()
        for page in range(1, 11):
            assert client.get("/jobs", params={"page": page}).status_code == 200
        assert (time.perf_counter() - started) / 10 < 2.0


def test_the_raw_page_is_bounded(big: ApiServer) -> None:
    with logged_in(big, "viewer") as client:
        raw = client.get("/jobs", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in raw.headers
    assert len(raw.content) < 400 * 1024
    assert isinstance(raw, httpx.Response)
