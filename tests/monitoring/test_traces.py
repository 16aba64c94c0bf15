"""Traces end to end through a real `runlane serve`: a traceparent given to the API (a run, a
chain run, an event) or the CLI (`--traceparent`, or the TRACEPARENT a process inherits) is
stored on the run and reaches its process as TRACEPARENT; chain steps and event runs join the
caller's trace with span ids of their own; a bad traceparent is one clear refusal; the
launcher's log lines about a traced run carry its trace id."""

from __future__ import annotations

import json
from typing import Any

from runlane.core.trace import parse_traceparent
from tests.monitoring.conftest import TRACE, TRACE_ID, Served
from tests.support.waiting import eventually_sync


def _run(served: Served, run_id: str) -> dict[str, Any]:
    answer = served.request("GET", f"/api/v1/runs/{run_id}", "viewer")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def _ended(served: Served, run_id: str) -> dict[str, Any]:
    return eventually_sync(
        lambda: (run := _run(served, run_id))["finished_at"] and run,
        f"run {run_id} ends",
        within=30,
    )


def _printed(served: Served, run_id: str) -> str:
    logs = served.cli("logs", run_id)
    assert logs.returncode == 0, logs.stderr
    return logs.stdout


def test_an_api_traceparent_reaches_the_run_and_its_process(served: Served) -> None:
    answer = served.request("POST", "/api/v1/jobs/hello/runs", "operator", json={},
                            headers={"traceparent": TRACE})  # fmt: skip
    assert answer.status_code == 201, answer.text
    run = answer.json()
    assert run["traceparent"] == TRACE
    ended = _ended(served, run["id"])
    assert ended["status"] == "success"
    assert f"TRACEPARENT={TRACE}" in _printed(served, run["id"])
    # The launcher's line about the run names the trace (JSON logs).
    lines = [json.loads(line) for line in served.stderr.read_text().splitlines() if "{" in line]
    finished = [
        line
        for line in lines
        if line.get("event") == "run.finished" and line.get("run_id") == run["id"]
    ]
    assert finished
    assert finished[0]["trace_id"] == TRACE_ID


def test_a_run_without_a_traceparent_gets_no_trace(served: Served) -> None:
    answer = served.request("POST", "/api/v1/jobs/hello/runs", "operator", json={})
    run = answer.json()
    assert run["traceparent"] is None
    _ended(served, run["id"])
    assert "TRACEPARENT=-" in _printed(served, run["id"])


def test_a_bad_api_traceparent_is_a_400_and_queues_nothing(served: Served) -> None:
    before = served.request("GET", "/api/v1/runs?job=hello&limit=500", "viewer").json()["items"]
    for bad in ("00-nope", TRACE.upper(), "00-" + "0" * 32 + "-00f067aa0ba902b7-01"):
        for path, body in (
            ("/api/v1/jobs/hello/runs", {}),
            ("/api/v1/chains/pair/runs", {}),
            ("/api/v1/events", {"key": "greet"}),
        ):
            answer = served.request("POST", path, "operator", json=body,
                                    headers={"traceparent": bad})  # fmt: skip
            assert answer.status_code == 400, (path, answer.text)
            problem = answer.json()
            assert problem["code"] == "invalid_traceparent"
            assert "traceparent" in problem["detail"]
    after = served.request("GET", "/api/v1/runs?job=hello&limit=500", "viewer").json()["items"]
    assert len(after) == len(before)


def test_chain_steps_join_the_callers_trace_with_their_own_spans(served: Served) -> None:
    answer = served.request("POST", "/api/v1/chains/pair/runs", "operator", json={},
                            headers={"traceparent": TRACE})  # fmt: skip
    assert answer.status_code == 201, answer.text
    chain_run = answer.json()["id"]

    def steps() -> list[dict[str, Any]] | None:
        page = served.request("GET", f"/api/v1/chain-runs/{chain_run}", "viewer")
        if page.status_code != 200:
            return None
        found = page.json().get("steps") or []
        done = [s for s in found if s.get("run_id")]
        return found if len(done) == 2 else None

    found = eventually_sync(steps, "both steps of the chain have runs", within=30)
    runs = [_ended(served, step["run_id"]) for step in found]
    spans = set()
    for run in runs:
        parsed = parse_traceparent(run["traceparent"])
        assert parsed.trace_id == TRACE_ID
        assert parsed.flags == "01"
        spans.add(parsed.span_id)
        assert f"TRACEPARENT={run['traceparent']}" in _printed(served, run["id"])
    assert len(spans) == 2
    assert "00f067aa0ba902b7" not in spans


def test_an_event_run_joins_the_events_trace(served: Served) -> None:
    answer = served.request("POST", "/api/v1/events", "operator", json={"key": "greet"},
                            headers={"traceparent": TRACE})  # fmt: skip
    assert answer.status_code == 200, answer.text
    (run_id,) = [r["run_id"] for r in answer.json()["runs"]]
    run = _ended(served, run_id)
    parsed = parse_traceparent(run["traceparent"])
    assert parsed.trace_id == TRACE_ID
    assert parsed.span_id != "00f067aa0ba902b7"


def test_the_cli_takes_traceparent_and_refuses_a_bad_one(served: Served) -> None:
    bad = served.cli("run", "hello", "--traceparent", "00-abc-def-01")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: traceparent '00-abc-def-01' is not a W3C traceparent")
    assert len(bad.stderr.strip().splitlines()) == 1
    for args, env in (
        (("run", "hello", "--wait", "--json", "--traceparent", TRACE), {}),
        (("run", "hello", "--wait", "--json"), {"TRACEPARENT": TRACE}),  # inherited
    ):
        ran = served.cli(*args, **env)
        assert ran.returncode == 0, ran.stderr
        run = json.loads(ran.stdout)
        assert run["traceparent"] == TRACE
        assert f"TRACEPARENT={TRACE}" in _printed(served, run["id"])
    chain = served.cli("chain", "run", "pair", "--json", "--traceparent", "garbage")
    assert chain.returncode == 2
    assert "traceparent" in chain.stderr
    emitted = served.cli("emit", "greet", "--json", "--traceparent", TRACE)
    assert emitted.returncode == 0, emitted.stderr
    run_id = json.loads(emitted.stdout)["runs"][0]["run_id"]
    assert parse_traceparent(_ended(served, run_id)["traceparent"]).trace_id == TRACE_ID
