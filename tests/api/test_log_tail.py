"""`GET /api/v1/runs/{id}/logs?tail=N` (read from the log's end, with where the text is in
headers) and `?follow=true&after=<offset>` (a follow that starts where a tail ended), against
the real server on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runlane.service import operations
from tests.api.conftest import CLI, ApiServer
from tests.api.test_endpoints import problem_of


def run_with_log(api: ApiServer, data: bytes) -> tuple[str, Path]:
    """A queued run of `hello` whose log file holds `data`."""
    queued = api.call(lambda rt: operations.run_job(rt, "hello", requester=CLI))
    path = Path(api.runtime.settings.log_dir) / f"{queued.run.id}.{queued.run.attempt}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return queued.run.id, path


def data_events(stream: str) -> list[tuple[str | None, str]]:
    """The (id, data) of each unnamed event of a server-sent event stream."""
    found: list[tuple[str | None, str]] = []
    for block in stream.split("\n\n"):
        fields = [line.split(": ", 1) for line in block.splitlines() if ": " in line]
        names = {k for k, _ in fields}
        if "data" in names and "event" not in names:
            event_id = next((v for k, v in fields if k == "id"), None)
            found.append((event_id, "\n".join(v for k, v in fields if k == "data")))
    return found


def test_a_whole_log_is_streamed_byte_for_byte(api: ApiServer) -> None:
    # The log file was read whole into memory before the answer: with log_max_bytes up to
    # 1 TiB, any viewer could make the server hold a huge buffer. It is streamed as it is read
    # (chunked, no Content-Length), its bytes as they are (the last ones not UTF-8).
    data = "output € line\n".encode() * (6 * 1024 * 1024 // 16) + b"caf\xe9 at the end"
    run_id, _ = run_with_log(api, data)
    with api.client("viewer") as c:
        with c.stream("GET", f"/api/v1/runs/{run_id}/logs") as r:
            body = r.read()
        problem_of(c.get("/api/v1/runs/" + "f" * 32 + "/logs"), 404, "unknown_run")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in r.headers
    assert r.headers["cache-control"] == "no-store"
    assert body == data


def test_a_download_held_open_takes_one_of_the_requesters_download_slots(
    api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow reader holds its download's file and task for as long as it reads: downloads
    # count against the requester, apart from its followed logs (MAX_STREAMS_PER_REQUESTER of
    # each; one here).
    from runlane.api.routes import logs

    monkeypatch.setattr(logs, "MAX_STREAMS_PER_REQUESTER", 1)
    data = b"x" * (64 * 1024 * 1024)  # far past the sockets' buffers: the server waits
    run_id, _ = run_with_log(api, data)
    url = f"/api/v1/runs/{run_id}/logs"
    with api.client("viewer") as c, api.client("viewer") as d:
        with c.stream("GET", url) as held:
            assert held.status_code == 200
            pieces = held.iter_raw()  # (kept: a dropped iterator closes the response)
            first = next(pieces)  # then the reader stalls
            second = d.get(url)
            assert second.status_code == 429  # (not the 64 MiB in the failure's message)
            refused = problem_of(second, 429, "too_many_streams")
            assert "log downloads" in refused["detail"], refused
            assert d.get(url, params={"tail": 1}).status_code == 200  # not a download
            assert len(first) + sum(len(p) for p in pieces) == len(data)  # read on: all of it
        # Ended: its slot is given back (at the server's end of the answer, just after).
        deadline = time.monotonic() + 10
        while True:
            with d.stream("GET", url) as again:
                status = again.status_code
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # polling for the condition, bounded by the deadline
        assert status == 200


def test_a_tail_is_the_last_lines_with_their_offsets(api: ApiServer) -> None:
    data = b"".join(b"line %d\n" % i for i in range(1, 101))
    run_id, _ = run_with_log(api, data)
    with api.client("viewer") as c:
        r = c.get(f"/api/v1/runs/{run_id}/logs", params={"tail": 2})
        problem_of(
            c.get(f"/api/v1/runs/{run_id}/logs", params={"tail": 0}), 422, "invalid_argument"
        )
    assert r.status_code == 200
    assert r.text == "line 99\nline 100\n"
    assert int(r.headers["log-end-offset"]) == len(data)
    assert int(r.headers["log-start-offset"]) == len(data) - len(r.content)


def test_a_follow_after_a_tails_end_sends_only_what_came_after(api: ApiServer) -> None:
    run_id, path = run_with_log(api, b"before\n" * 50)
    with api.client("viewer") as c:
        tail = c.get(f"/api/v1/runs/{run_id}/logs", params={"tail": 5})
        end = int(tail.headers["log-end-offset"])
        with path.open("ab") as fh:
            fh.write(b"after one\nafter two\n")
        api.call(lambda rt: operations.cancel(rt, run_id, requester=CLI))
        followed = c.get(f"/api/v1/runs/{run_id}/logs", params={"follow": "true", "after": end})
        # A reconnecting EventSource sends its Last-Event-ID with the first URL: the header wins.
        resumed = c.get(
            f"/api/v1/runs/{run_id}/logs",
            params={"follow": "true", "after": 0},
            headers={"Last-Event-ID": str(end + len(b"after one\n"))},
        )
        problem_of(
            c.get(f"/api/v1/runs/{run_id}/logs", params={"after": end}), 422, "invalid_argument"
        )
        negative = c.get(f"/api/v1/runs/{run_id}/logs", params={"follow": "true", "after": -1})
    assert negative.status_code == 422
    assert followed.status_code == 200
    assert data_events(followed.text) == [(str(end + 20), "after one\nafter two")]
    assert "event: end" in followed.text
    assert data_events(resumed.text) == [(str(end + 20), "after two")]


def test_a_resumed_follow_of_output_that_is_not_utf8_loses_nothing(api: ApiServer) -> None:
    # Event ids are byte offsets of the log: a byte that is not UTF-8 (a job printing Latin-1)
    # counts as the one byte it is, not as the three of its U+FFFD; else a client that resumes
    # with its Last-Event-ID is sent the log from a later byte than it has, losing output.
    first = b"caf\xe9\n"
    run_id, path = run_with_log(api, first)
    with api.client("viewer") as c:
        api.call(lambda rt: operations.cancel(rt, run_id, requester=CLI))
        followed = c.get(f"/api/v1/runs/{run_id}/logs", params={"follow": "true"})
        with path.open("ab") as fh:  # what the client has not seen yet
            fh.write(b"line two\n")
        seen = data_events(followed.text)[-1][0]
        assert seen is not None
        resumed = c.get(
            f"/api/v1/runs/{run_id}/logs",
            params={"follow": "true"},
            headers={"Last-Event-ID": seen},
        )
    assert data_events(followed.text) == [(str(len(first)), "caf\ufffd")]
    assert data_events(resumed.text) == [(str(len(first) + 9), "line two")]


def test_a_last_event_id_of_superscript_digits_is_a_400(api: ApiServer) -> None:
    # `"²".isdigit()` is true but `int("²")` fails: the header is malformed, not a 500.
    run_id, _ = run_with_log(api, b"one\n")
    with api.client("viewer") as c:
        for sent in ("²".encode("latin-1"), "1¹".encode("latin-1")):
            r = c.get(
                f"/api/v1/runs/{run_id}/logs",
                params={"follow": "true"},
                headers={"Last-Event-ID": sent},
            )
            problem_of(r, 400, "malformed_request")
