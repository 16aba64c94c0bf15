"""`GET /api/v1/runs`' hot path (`runs.RunListRoute`) through the real server on SQLite and
PostgreSQL: a plain query is answered without FastAPI's parameter solving, any other goes
FastAPI's way, and both answer the same bytes, problems and headers; the hot path
authenticates with the functions the `Viewer` dependency calls."""

from __future__ import annotations

import inspect
from typing import Any, get_args, get_type_hints

import httpx
import pytest
from starlette.requests import Request

from runlane.api import auth
from runlane.api.routes import runs
from runlane.core.runs import BASIC_LEFT_OUT
from runlane.service import operations

from .conftest import ApiServer

# A query parameter the route does not take: FastAPI ignores it, the hot path declines it.
GENERAL = {"unused": "1"}


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each request took the hot path (True) or FastAPI's (False), in order."""
    seen: list[bool] = []
    plain = runs.plain_query

    def recording(request: Request) -> dict[str, Any] | None:
        query = plain(request)
        seen.append(query is not None)
        return query

    monkeypatch.setattr(runs, "plain_query", recording)
    return seen


def both_ways(
    c: httpx.Client, taken: list[bool], params: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response]:
    """`params` asked the hot way and FastAPI's way (the same plus a parameter it ignores)."""
    del taken[:]
    hot = c.get("/api/v1/runs", params=params)
    general = c.get("/api/v1/runs", params={**params, **GENERAL})
    assert taken == [True, False], params
    return hot, general


def test_both_ways_answer_the_same_pages(api: ApiServer, taken: list[bool]) -> None:
    with api.client("operator") as c:
        for _ in range(5):
            assert c.post("/api/v1/jobs/hello/runs", json={}).status_code == 201
        first = c.get("/api/v1/runs", params={"job": "hello", "limit": 2}).json()
        assert first["next_cursor"], first
        queries: list[dict[str, Any]] = [
            {},
            {"limit": 2},
            {"job": "hello", "limit": "3"},
            {"job": "hello", "limit": 2, "cursor": first["next_cursor"]},
            {"status": "queued", "trigger": "manual", "requested_by": "operator"},
            {"since": "now-1d", "until": "2999-01-01T00:00:00Z"},
            {"job": "no-such-job"},
            {"job": "hello", "view": "basic"},
            {"view": "full", "limit": 2},
        ]
        for params in queries:
            hot, general = both_ways(c, taken, params)
            assert hot.status_code == general.status_code == 200, (params, hot.text)
            assert hot.content == general.content, params
            assert hot.headers["content-type"] == general.headers["content-type"]
            assert hot.headers["content-type"] == "application/json"
            assert hot.headers["cache-control"] == "no-store"
        page = c.get("/api/v1/runs", params={"job": "hello", "limit": 5}).json()
    assert len(page["items"]) == 5
    assert all(i["job"] == "hello" and i["queued_at"].endswith("Z") for i in page["items"])
    assert all("lease_token" not in i for i in page["items"])


def test_both_ways_refuse_alike(api: ApiServer, taken: list[bool]) -> None:
    cases: list[tuple[str | None, dict[str, str], dict[str, Any], int, str]] = [
        (None, {}, {}, 401, "unauthenticated"),
        (None, {"Authorization": "Bearer rl_not-a-token"}, {}, 401, "unauthenticated"),
        (None, {"Authorization": "Basic abc"}, {"limit": "5"}, 401, "unauthenticated"),
        ("viewer", {}, {"limit": "0"}, 422, "invalid_argument"),
        ("viewer", {}, {"limit": "501"}, 422, "invalid_argument"),
        ("viewer", {}, {"cursor": "garbage!"}, 422, "invalid_argument"),
        ("viewer", {}, {"since": "last tuesday"}, 422, "invalid_argument"),
        ("viewer", {}, {"since": "now-1h", "until": "now-2h"}, 422, "invalid_argument"),
    ]
    for role, headers, params, status, code in cases:
        with api.client(role, **headers) as c:
            hot, general = both_ways(c, taken, params)
        assert hot.status_code == general.status_code == status, (params, hot.text)
        assert hot.json() == general.json(), params
        assert hot.json()["code"] == code
        assert hot.headers["content-type"].startswith("application/problem+json")
        assert hot.headers.get("www-authenticate") == general.headers.get("www-authenticate")


def request_of(query: bytes) -> Request:
    return Request({"type": "http", "method": "GET", "query_string": query, "headers": []})


@pytest.mark.parametrize(
    "query",
    [
        b"limit=abc",
        b"limit=%2B5",  # pydantic reads "+5"; the hot path leaves such spellings to it
        b"limit=%EF%BC%95",  # a full-width digit
        b"limit=12345",
        b"status=nope",
        b"trigger=Manual",
        b"job=",
        b"job=a&job=b",
        b"job=%00",
        b"unknown=1",
        b"view=Basic",
    ],
)
def test_the_hot_path_declines_what_fastapi_must_check(query: bytes) -> None:
    assert runs.plain_query(request_of(query)) is None


def test_the_hot_path_reads_a_plain_query() -> None:
    query = (
        b"job=etl.load&status=failure&trigger=retry&limit=0500&cursor=abc&since=now-1d&view=basic"
    )
    assert runs.plain_query(request_of(query)) == {
        "job": "etl.load",
        "status": "failure",
        "trigger": "retry",
        "limit": 500,
        "cursor": "abc",
        "since": "now-1d",
        "view": "basic",
    }
    assert runs.plain_query(request_of(b"")) == {}


def test_the_hot_path_authenticates_as_the_viewer_dependency_does() -> None:
    """`RunListRoute` calls `auth.requester_of` and then `auth.viewer`, which is what the
    `Viewer` dependency resolves to. If `Viewer` comes to depend on something else (say, a
    session cookie's reader), this fails: make the hot path call that too."""
    (_, marker) = get_args(auth.Viewer)
    assert marker.dependency is auth.viewer
    hints = get_type_hints(auth.viewer, include_extras=True)
    (_, needs) = get_args(hints["requester"])
    assert needs.dependency is auth.requester_of
    source = inspect.getsource(runs.RunListRoute)
    assert "await viewer(await requester_of(request, rt))" in source


def test_the_basic_view_leaves_out_the_unbounded_fields(api: ApiServer) -> None:
    """`view=basic`: every run as the full view has it, without `params`, `note` and
    `log_tail` (a finished run's saved tail is up to 64 KiB); an unknown view is refused."""
    with api.client("operator") as c:
        made = c.post("/api/v1/jobs/typed/runs", json={"params": {"count": 3}})
        assert made.status_code == 201, made.text
        full = c.get("/api/v1/runs", params={"job": "typed"}).json()["items"]
        basic = c.get("/api/v1/runs", params={"job": "typed", "view": "basic"}).json()["items"]
        wrong = c.get("/api/v1/runs", params={"view": "everything"})
    assert [i["id"] for i in full] == [made.json()["id"]]
    assert full[0]["params"] == {"count": 3}
    assert {"log_tail", "note"} <= set(full[0])
    assert basic == [{k: v for k, v in full[0].items() if k not in BASIC_LEFT_OUT}]
    assert wrong.status_code == 422
    assert wrong.headers["content-type"].startswith("application/problem+json")
    assert wrong.json()["code"] == "invalid_argument"
    assert "view" in wrong.text
    # The route's choices are the operation's.
    assert get_args(runs.RunListView) == operations.RUN_LIST_VIEWS
