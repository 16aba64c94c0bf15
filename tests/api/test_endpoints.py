"""Every endpoint of the HTTP API through the real server (uvicorn on 127.0.0.1) on SQLite and
PostgreSQL: the answers' shapes, every error status of issue 15 §3 as a problem, auth for every
role, job-glob scopes, idempotency, the audit rows, a pagination walk."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from runlane.core.access import Role
from runlane.core.runs import RunStatus
from runlane.service import operations

from .conftest import ApiServer

PROBLEM = "application/problem+json"


def problem_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem body of `response`, checked to be a problem of `status` and `code`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert body["type"] == f"https://runlane.dev/problems/{code}"
    assert body["title"]
    assert body["detail"]
    assert "Traceback" not in response.text
    return body


def audit_rows(api: ApiServer, action: str) -> list[Any]:
    page = api.call(lambda rt: operations.list_audit(rt, limit=500))
    return [e for e in page.items if e.action == action]


# ------------------------------------------------------------------------------ reads


def test_jobs_list_every_job_with_its_params_schema_and_schedules(api: ApiServer) -> None:
    with api.client("viewer") as c:
        r = c.get("/api/v1/jobs")
    assert r.status_code == 200
    body = r.json()
    assert body["next_cursor"] is None
    jobs = {j["job"]: j for j in body["items"]}
    assert set(jobs) >= {"hello", "typed", "careful", "single", "etl.load"}
    typed = jobs["typed"]["params_schema"]
    assert typed["required"] == ["count"]
    assert typed["properties"]["count"] == {"type": "integer"}
    assert typed["properties"]["mode"]["enum"] == ["fast", "slow", None]
    assert typed["additionalProperties"] is False
    hello = jobs["hello"]
    zones = [(s["cron"], s["timezone"]) for s in hello["schedule_slots"]]
    assert zones == [("0 * * * *", "Europe/Berlin"), ("30 6 * * *", "America/New_York")]
    ny = hello["schedule_slots"][1]["next_slots"]
    assert len(ny) == 3
    assert all(s["utc"].endswith("Z") and "T06:30:00-0" in s["local"] for s in ny)


def test_job_show_has_its_pause_state_and_last_run(api: ApiServer) -> None:
    with api.client("operator") as c:
        queued = c.post("/api/v1/jobs/etl.clean/runs", json={}).json()
        r = c.get("/api/v1/jobs/etl.clean")
    assert r.status_code == 200
    body = r.json()
    assert body["paused"] is False
    assert body["last_run"]["id"] == queued["id"]


def test_unknown_job_run_chain_and_route_are_404_problems(api: ApiServer) -> None:
    with api.client("viewer") as c:
        problem_of(c.get("/api/v1/jobs/nosuch"), 404, "unknown_job")
        problem_of(c.get("/api/v1/runs/" + "f" * 32), 404, "unknown_run")
        problem_of(c.get("/api/v1/chain-runs/" + "e" * 32), 404, "unknown_chain_run")
        body = problem_of(c.get("/api/v1/nowhere"), 404, "not_found")
    assert body["instance"] == "/api/v1/nowhere"
    with api.client("operator") as c:
        problem_of(c.post("/api/v1/chains/nosuch/runs", json={}), 404, "unknown_chain")


def test_a_method_a_route_does_not_take_is_405_with_allow(api: ApiServer) -> None:
    with api.client("viewer") as c:
        r = c.delete("/api/v1/jobs")
    problem_of(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET"


def test_launchers_schedule_and_explain(api: ApiServer) -> None:
    with api.client("viewer") as c:
        launchers = c.get("/api/v1/launchers")
        table = c.get(
            "/api/v1/schedule",
            params={"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T03:00:00Z"},
        )
        explained = c.get("/api/v1/jobs/hello/explain", params={"at": "2026-12-01T08:10:00Z"})
        bad = c.get("/api/v1/schedule", params={"from": "yesterday-ish"})
    assert launchers.status_code == 200
    assert launchers.json()["items"] == []
    rows = table.json()["items"]
    assert [r["slot"] for r in rows if r["name"] == "hello"] == [
        "2026-12-01T00:00:00Z",
        "2026-12-01T01:00:00Z",
        "2026-12-01T02:00:00Z",
    ]
    assert explained.status_code == 200
    assert explained.json()["slot"] == "2026-12-01T08:00:00Z"
    problem_of(bad, 422, "invalid_argument")


def test_chains_list_and_a_chain_run_tree(api: ApiServer) -> None:
    with api.client("operator") as c:
        chains = c.get("/api/v1/chains").json()["items"]
        started = c.post("/api/v1/chains/pair/runs", json={})
        assert started.status_code == 201
        shown = c.get(started.headers["location"])
        recent = c.get("/api/v1/chain-runs", params={"limit": 5}).json()["items"]
    assert [ch["chain"] for ch in chains] == ["pair"]
    assert [s["step"] for s in chains[0]["steps"]] == ["first", "second"]
    tree = shown.json()
    assert tree["id"] == started.json()["id"]
    assert recent[0]["id"] == tree["id"]
    assert {s["step"]: s["status"] for s in tree["steps"]} == {
        "first": "queued",
        "second": "pending",
    }


# ------------------------------------------------------------------------------ runs


def test_post_run_is_201_with_location_and_the_callers_name(api: ApiServer) -> None:
    with api.client("operator") as c:
        r = c.post("/api/v1/jobs/typed/runs", json={"params": {"count": 3, "mode": "fast"}})
        assert r.status_code == 201, r.text
        run = r.json()
        assert r.headers["location"] == f"/api/v1/runs/{run['id']}"
        again = c.get(r.headers["location"])
    assert (run["trigger"], run["requested_by"], run["status"]) == ("manual", "operator", "queued")
    assert run["params"] == {"count": 3, "mode": "fast"}
    assert "lease_token" not in run
    assert again.json()["id"] == run["id"]
    rows = audit_rows(api, "run_job")
    assert any(e.target == "typed" and e.outcome == "ok" and e.remote == "127.0.0.1" for e in rows)


def test_bad_params_are_422_listing_every_problem_with_pointers(api: ApiServer) -> None:
    with api.client("operator") as c:
        r = c.post(
            "/api/v1/jobs/typed/runs", json={"params": {"count": "many", "mode": "x", "nope": 1}}
        )
    body = problem_of(r, 422, "param_invalid")
    pointers = {e["pointer"] for e in body["errors"]}
    assert pointers == {"/params/count", "/params/mode", "/params/nope"}
    rows = audit_rows(api, "run_job")
    assert any(e.target == "typed" and e.outcome == "param_invalid" for e in rows)


def test_a_body_that_is_not_json_is_400_and_a_bad_field_422(api: ApiServer) -> None:
    with api.client("operator") as c:
        r = c.post(
            "/api/v1/jobs/hello/runs",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        problem_of(r, 400, "malformed_request")
        r = c.post("/api/v1/jobs/hello/runs", json={"params": [], "confirmd": "x"})
    body = problem_of(r, 422, "invalid_argument")
    assert {e["pointer"] for e in body["errors"]} == {"/params", "/confirmd"}


def test_a_run_without_a_body_is_a_run_without_params(api: ApiServer) -> None:
    # As for a chain run or a pause: `curl -X POST .../jobs/hello/runs` needs no `{}`.
    with api.client("operator") as c:
        r = c.post("/api/v1/jobs/hello/runs")
        assert r.status_code == 201, r.text
        assert (r.json()["job"], r.json()["params"]) == ("hello", {})
        problem_of(c.post("/api/v1/jobs/typed/runs"), 422, "param_invalid")


def test_a_json_body_sent_as_a_form_is_400_saying_which_content_type(api: ApiServer) -> None:
    # `curl -d '{...}'` without -H 'Content-Type: application/json' sends a form.
    form = {"content-type": "application/x-www-form-urlencoded"}
    with api.client("operator") as c:
        for path in ("/api/v1/jobs/hello/runs", "/api/v1/jobs/hello/pause", "/api/v1/events"):
            r = c.post(path, content=b'{"key": "greet"}', headers=form)
            body = problem_of(r, 400, "malformed_request")
            assert "Content-Type: application/json" in body["detail"], body
            assert "application/x-www-form-urlencoded" in body["detail"], body
    assert api.call(lambda rt: operations.show_job(rt, "hello")).pause is None


def test_acts_jobs_need_confirm_equal_to_the_job_name(api: ApiServer) -> None:
    with api.client("operator") as c:
        problem_of(c.post("/api/v1/jobs/careful/runs", json={}), 422, "confirmation_required")
        wrong = c.post("/api/v1/jobs/careful/runs", json={"confirm": "hello"})
        problem_of(wrong, 422, "confirmation_required")
        ok = c.post("/api/v1/jobs/careful/runs", json={"confirm": "careful"})
    assert ok.status_code == 201


def test_overlap_is_409_with_the_active_run_and_cancel_then_not_cancellable(
    api: ApiServer,
) -> None:
    with api.client("operator") as c:
        first = c.post("/api/v1/jobs/single/runs", json={}).json()
        body = problem_of(c.post("/api/v1/jobs/single/runs", json={}), 409, "overlap_refused")
        assert body["active_run_id"] == first["id"]
        cancelled = c.post(f"/api/v1/runs/{first['id']}/cancel")
        assert cancelled.status_code == 202
        assert cancelled.json()["status"] == RunStatus.CANCELLED
        problem_of(c.post(f"/api/v1/runs/{first['id']}/cancel"), 409, "not_cancellable")
    assert [e.outcome for e in audit_rows(api, "cancel") if e.target == first["id"]] == [
        "not_cancellable",
        "ok",
    ]


def test_a_body_over_the_limit_is_413_and_params_over_theirs_too(api: ApiServer) -> None:
    with api.client("operator") as c:
        huge = b'{"params": {"label": "' + b"x" * (2 * 1024 * 1024) + b'"}}'
        r = c.post(
            "/api/v1/jobs/typed/runs", content=huge, headers={"content-type": "application/json"}
        )
        problem_of(r, 413, "payload_too_large")

        def chunks() -> Any:
            yield b'{"params": {"label": "'
            for _ in range(40):
                yield b"x" * 65536
            yield b'"}}'

        streamed = c.post(
            "/api/v1/jobs/typed/runs",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        problem_of(streamed, 413, "payload_too_large")
        # Within the body's limit, past the params' (1 MiB as compact JSON): the accept path.
        params = {"count": 1, "label": "y" * (1024 * 1024)}
        problem_of(
            c.post("/api/v1/jobs/typed/runs", json={"params": params}), 413, "payload_too_large"
        )


def test_run_list_filters_and_a_cursor_walk(api: ApiServer) -> None:
    tag = uuid.uuid4().hex[:8]
    with api.client("operator") as c:
        made = [
            c.post("/api/v1/jobs/typed/runs", json={"params": {"count": i, "label": tag}}).json()
            for i in range(5)
        ]
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"job": "typed", "limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = c.get("/api/v1/runs", params=params).json()
            seen.extend(r["id"] for r in page["items"])
            # A run inserted mid-walk is newer: never in a later page.
            if len(seen) == 2:
                c.post("/api/v1/jobs/typed/runs", json={"params": {"count": 99}})
            cursor = page["next_cursor"]
            if cursor is None:
                break
        filtered = c.get(
            "/api/v1/runs", params={"status": "queued", "trigger": "manual", "job": "typed"}
        )
        bad = c.get("/api/v1/runs", params={"cursor": "garbage!"})
        bad_limit = c.get("/api/v1/runs", params={"limit": 0})
        bad_status = c.get("/api/v1/runs", params={"status": "nope"})
    ids = [m["id"] for m in made]
    assert [i for i in seen if i in ids] == ids[::-1]
    assert len(seen) == len(set(seen))
    assert all(r["status"] == "queued" for r in filtered.json()["items"])
    problem_of(bad, 422, "invalid_argument")
    problem_of(bad_limit, 422, "invalid_argument")
    body = problem_of(bad_status, 422, "invalid_argument")
    assert body["errors"][0]["pointer"] == "#/query/status"


# ------------------------------------------------------------------------------ events, pauses


def test_post_event_starts_its_listeners_runs(api: ApiServer) -> None:
    event_id = uuid.uuid4().hex
    with api.client("operator") as c:
        r = c.post("/api/v1/events", json={"key": "greet", "data": {"a": 1}, "id": event_id})
        again = c.post("/api/v1/events", json={"key": "greet", "data": {"a": 1}, "id": event_id})
        problem_of(c.post("/api/v1/events", json={"key": "bad key"}), 422, "bad_event")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["event"]["id"] == event_id
    assert body["event"]["new"] is True
    assert [x["job"] for x in body["runs"]] == ["hello"]
    assert again.json()["event"]["new"] is False


def test_pause_and_resume(api: ApiServer) -> None:
    with api.client("operator") as c:
        paused = c.post("/api/v1/jobs/etl.load/pause", json={"until": "2h", "reason": "db move"})
        shown = c.get("/api/v1/jobs/etl.load").json()
        resumed = c.post("/api/v1/jobs/etl.load/resume")
        problem_of(
            c.post("/api/v1/jobs/etl.load/pause", json={"until": "2001-01-01T00:00:00Z"}),
            422,
            "invalid_argument",
        )
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused_by"] == "operator"
    assert shown["paused"]
    assert shown["pause_reason"] == "db move"
    assert resumed.json() == {"job": "etl.load", "was_paused": True}


# ------------------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer rl_not-a-real-token"}, {"Authorization": "Basic abc"}],
    ids=["none", "unknown", "other-scheme"],
)
def test_no_or_a_bad_token_is_401_with_www_authenticate(
    api: ApiServer, headers: dict[str, str]
) -> None:
    with api.client(None, **headers) as c:
        r = c.get("/api/v1/jobs")
    problem_of(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"] == 'Bearer realm="runlane"'


def test_the_probes_answer_head_as_get(api: ApiServer) -> None:
    # Uptime monitors and load balancers often probe with HEAD (`curl -I`).
    with api.client(None) as c:
        for path in ("/healthz", "/readyz"):
            head, get = c.head(path), c.get(path)
            assert (head.status_code, get.status_code) == (200, 200), (path, head.text)
            assert head.content == b""
            assert head.headers["content-type"] == get.headers["content-type"]


def test_the_probes_need_no_token_and_everything_else_does(api: ApiServer) -> None:
    with api.client(None) as c:
        assert c.get("/healthz").status_code == 200
        problem_of(c.get("/api/v1/openapi.json"), 401, "unauthenticated")
        problem_of(c.get("/api/v1/runs/" + "a" * 32 + "/logs"), 401, "unauthenticated")
        before = len(audit_rows(api, "run_job"))
        problem_of(c.post("/api/v1/jobs/hello/runs", json={}), 401, "unauthenticated")
    # Anybody can send a 401: logged, not an audit row each (the table would be theirs to fill).
    assert len(audit_rows(api, "run_job")) == before


def test_a_runs_log_through_the_api(api: ApiServer) -> None:
    with api.client("operator") as c:
        run = c.post("/api/v1/jobs/hello/runs", json={}).json()
        log = c.get(f"/api/v1/runs/{run['id']}/logs")
    assert log.status_code == 200
    assert log.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("role", "allowed"), [("viewer", False), ("operator", True), ("admin", True)]
)
def test_each_role_reads_and_only_operators_and_admins_write(
    api: ApiServer, role: str, allowed: bool
) -> None:
    with api.client(role) as c:
        assert c.get("/api/v1/runs").status_code == 200
        r = c.post("/api/v1/jobs/hello/runs", json={})
        cancel = c.post("/api/v1/runs/" + "a" * 32 + "/cancel")
        pause = c.post("/api/v1/jobs/hello/resume")
    if allowed:
        assert r.status_code == 201
        problem_of(cancel, 404, "unknown_run")
        assert pause.status_code == 200
    else:
        problem_of(r, 403, "forbidden")
        problem_of(pause, 403, "forbidden")
        assert any(e.outcome == "forbidden" for e in audit_rows(api, "run_job"))


def test_a_scoped_token_writes_only_its_jobs(api: ApiServer) -> None:
    with api.client("etl") as c:
        assert c.post("/api/v1/jobs/etl.load/runs", json={}).status_code == 201
        problem_of(c.post("/api/v1/jobs/hello/runs", json={}), 403, "forbidden")
        assert c.get("/api/v1/jobs/hello").status_code == 200  # reads are not scoped


def test_a_revoked_token_is_401(api: ApiServer) -> None:
    made = api.call(
        lambda rt: operations.create_token(
            rt, "short-lived", role=Role.VIEWER, requester=operations.Requester(None)
        )
    )
    with api.client(None, Authorization=f"Bearer {made.secret}") as c:
        assert c.get("/api/v1/jobs").status_code == 200
        api.call(
            lambda rt: operations.revoke_token(
                rt, "short-lived", requester=operations.Requester(None)
            )
        )
        problem_of(c.get("/api/v1/jobs"), 401, "unauthenticated")


# ------------------------------------------------------------------------------ idempotency


def test_idempotency_key_replays_and_refuses_another_body(api: ApiServer) -> None:
    key = uuid.uuid4().hex
    with api.client("operator", **{"Idempotency-Key": key}) as c:
        first = c.post("/api/v1/jobs/typed/runs", json={"params": {"count": 1}})
        replay = c.post(
            "/api/v1/jobs/typed/runs",
            content=json.dumps({"params": {"count": 1}}, indent=2),
            headers={"content-type": "application/json"},
        )
        other = c.post("/api/v1/jobs/typed/runs", json={"params": {"count": 2}})
    assert first.status_code == replay.status_code == 201
    assert replay.json()["id"] == first.json()["id"]
    assert replay.headers["idempotency-replayed"] == "true"
    assert replay.headers["location"] == first.headers["location"]
    problem_of(other, 422, "idempotency_key_reused")


def test_a_refused_run_does_not_use_up_its_idempotency_key(api: ApiServer) -> None:
    key = uuid.uuid4().hex
    with api.client("operator", **{"Idempotency-Key": key}) as c:
        refused = c.post("/api/v1/jobs/careful/runs", json={})
        problem_of(refused, 422, "confirmation_required")
        # Nothing was saved under the key: the corrected request is a first use, not a reuse.
        ok = c.post("/api/v1/jobs/careful/runs", json={"confirm": "careful"})
    assert ok.status_code == 201, ok.text


# ------------------------------------------------------------------------------ headers, spec


def test_security_headers_on_every_answer(api: ApiServer) -> None:
    with api.client("viewer") as c:
        answers = [c.get("/api/v1/jobs"), c.get("/api/v1/nowhere"), c.get("/healthz")]
    for r in answers:
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert answers[0].headers["cache-control"] == "no-store"
    assert "access-control-allow-origin" not in answers[0].headers


def test_the_openapi_spec_is_served(api: ApiServer) -> None:
    with api.client("viewer") as c:
        spec = c.get("/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    assert "/api/v1/jobs/{job}/runs" in spec["paths"]
