"""The review's findings on auth, idempotency and input edges, through the real server: a forged
X-Forwarded-For from loopback changes nothing; an Idempotency-Key's run is written once even
when the first attempt fails after the write; a replay is checked, audited as `replayed`, and
keys are owned per kind of caller; text the database cannot store is a 422 naming the field,
never a 500; a job-scoped token may not emit an event nobody listens to."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane.errors import InvalidArgument, StoreError
from runlane.service import operations
from runlane.service.operations import chains as chain_operations
from runlane.service.operations import idempotency
from runlane.service.operations import runs as run_operations
from runlane.service.runtime import Runtime
from runlane.testing.clock import FixedClock

from .conftest import ApiServer, api_settings, running_api
from .test_endpoints import audit_rows, problem_of

TEN_NET_USER = {
    "X-Forwarded-For": "10.0.0.5",
    "X-Forwarded-User": "mallory",
    "X-Forwarded-Groups": "ops",
}


def trusting(
    factory: pytest.TempPathFactory, networks: tuple[str, ...]
) -> contextlib.AbstractContextManager[ApiServer]:
    """The API (SQLite) trusting `networks` as auth proxies; groups `ops` and `all` mapped."""
    tmp = factory.mktemp("api-hardening")
    roles = (("ops", "operator"), ("all", "viewer"))
    url = f"sqlite:///{tmp / 'runlane.db'}"
    settings = api_settings(tmp, url, http_trusted_proxies=networks, http_group_roles=roles)
    return running_api(settings, "sqlite")


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """Trusting 127.0.0.0/8, where the tests connect from."""
    with trusting(tmp_path_factory, ("127.0.0.0/8",)) as server:
        yield server


@pytest.fixture(scope="module")
def ten_net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """Trusting only 10.0.0.0/8: loopback is not one of them."""
    with trusting(tmp_path_factory, ("10.0.0.0/8",)) as server:
        yield server


def fail_once(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, message: str) -> None:
    """`module.name` (a coroutine function) raises StoreError(message) at its next call only."""
    real = getattr(module, name)
    failures = [StoreError(message)]

    async def failing_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(module, name, failing_once)


# ------------------------------------------------------------------------------ 1: the peer


def test_a_forged_forwarded_for_from_loopback_is_not_a_trusted_proxy(ten_net: ApiServer) -> None:
    with ten_net.client(None, **TEN_NET_USER) as c:
        problem_of(c.post("/api/v1/jobs/hello/runs", json={}), 401, "unauthenticated")
        problem_of(c.get("/api/v1/jobs"), 401, "unauthenticated")


def test_the_audit_records_the_peer_not_a_forwarded_for(ten_net: ApiServer) -> None:
    with ten_net.client("operator", **{"X-Forwarded-For": "203.0.113.9"}) as c:
        run = c.post("/api/v1/jobs/hello/runs", json={})
    assert run.status_code == 201, run.text
    remotes = {e.remote for e in audit_rows(ten_net, "run_job")}
    assert remotes == {"127.0.0.1"}


# ------------------------------------------------------------------------------ 3: key and run


async def run_ids(rt: Runtime) -> set[str]:
    return {r.id for r in await operations.list_runs(rt, job="etl.clean", limit=500)}


async def chain_run_ids(rt: Runtime) -> set[str]:
    return {v.run.id for v in await operations.list_chain_runs(rt, limit=10_000)}


@pytest.mark.parametrize(
    ("path", "module", "late", "written_ids"),
    [
        ("/api/v1/jobs/etl.clean/runs", run_operations, "queued_run_notices", run_ids),
        ("/api/v1/chains/pair/runs", chain_operations, "chain_notices", chain_run_ids),
    ],
    ids=["run", "chain-run"],
)
def test_a_retry_after_a_failure_past_the_write_finds_the_same_run(
    api: ApiServer,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    module: Any,
    late: str,
    written_ids: Callable[[Runtime], Awaitable[set[str]]],
) -> None:
    # The run is committed, then a read after it fails: the client sees a 500 and retries.
    fail_once(monkeypatch, module, late, "gone after the commit")
    with api.client("operator", **{"Idempotency-Key": uuid.uuid4().hex}) as c:
        problem_of(c.post(path, json={}), 500, "store_error")
        written = api.call(written_ids)
        retry = c.post(path, json={})
        replay = c.post(path, json={})
    assert retry.status_code == 201, retry.text
    assert retry.json()["id"] in written
    assert api.call(written_ids) == written
    assert replay.json()["id"] == retry.json()["id"]
    assert replay.headers["idempotency-replayed"] == "true"


def test_an_answer_that_could_not_be_kept_is_sent_and_its_retry_finds_the_run(
    api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keeping the answer fails: the client still gets its run, and the key is not left in
    # flight (409 for a minute and a half); the retry finds the same run.
    fail_once(monkeypatch, api.runtime.store, "complete_key", "gone before the answer was kept")
    with api.client("operator", **{"Idempotency-Key": uuid.uuid4().hex}) as c:
        first = c.post("/api/v1/jobs/etl.clean/runs", json={})
        retry = c.post("/api/v1/jobs/etl.clean/runs", json={})
    assert first.status_code == retry.status_code == 201, retry.text
    assert retry.json()["id"] == first.json()["id"]


@pytest.mark.parametrize("path", ["/api/v1/jobs/etl.clean/runs", "/api/v1/chains/pair/runs"])
def test_a_key_used_again_after_it_expired_makes_a_new_run(
    api: ApiServer, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """An Idempotency-Key is kept 24 hours: the same key and request a day later is a new
    request. It was answered 201 with the day-old run (no replay header, nothing queued), the
    run log's dedupe key being unique forever. A retry within each life still finds that
    life's run, and a third life a day later makes a third."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    lives: list[str] = []
    for day in range(3):
        if day:  # a day and an hour later, by the database's clock and the server's
            later = datetime.now(UTC) + timedelta(hours=25 * day)
            monkeypatch.setattr(api.runtime.store, "_clock", FixedClock(later))
            monkeypatch.setattr(idempotency, "_wall_now", lambda at=later: at)
        with api.client("operator", **key) as c:
            first = c.post(path, json={})
            replay = c.post(path, json={})
        assert first.status_code == 201, first.text
        assert "idempotency-replayed" not in first.headers
        assert replay.headers["idempotency-replayed"] == "true"
        assert replay.json()["id"] == first.json()["id"]
        lives.append(first.json()["id"])
    assert len(set(lives)) == 3, lives


# ------------------------------------------------------------------------------ 9: replays


def test_a_replay_is_audited_as_replayed(api: ApiServer) -> None:
    key = uuid.uuid4().hex
    with api.client("operator", **{"Idempotency-Key": key}) as c:
        first = c.post("/api/v1/jobs/etl.load/runs", json={})
        again = c.post("/api/v1/jobs/etl.load/runs", json={})
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    newest = [e.outcome for e in audit_rows(api, "run_job") if e.target == "etl.load"][:2]
    assert newest == ["replayed", "ok"]


def test_a_replay_still_needs_the_role(proxied: ApiServer) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    operator = {"X-Forwarded-User": "dana", "X-Forwarded-Groups": "ops", **key}
    with proxied.client(None, **operator) as c:
        assert c.post("/api/v1/jobs/hello/runs", json={}).status_code == 201
    # The same user, now only in a viewer group, with the same key and body: no stored answer.
    viewer = {"X-Forwarded-User": "dana", "X-Forwarded-Groups": "all", **key}
    with proxied.client(None, **viewer) as c:
        problem_of(c.post("/api/v1/jobs/hello/runs", json={}), 403, "forbidden")
    assert audit_rows(proxied, "run_job")[0].outcome == "forbidden"


def test_a_proxy_user_named_like_a_token_has_keys_of_its_own(proxied: ApiServer) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    with proxied.client("operator", **key) as c:
        by_token = c.post("/api/v1/jobs/hello/runs", json={})
    namesake = {"X-Forwarded-User": "operator", "X-Forwarded-Groups": "ops", **key}
    with proxied.client(None, **namesake) as c:
        by_user = c.post("/api/v1/jobs/hello/runs", json={})
    assert by_token.status_code == by_user.status_code == 201, by_user.text
    assert "idempotency-replayed" not in by_user.headers
    assert by_user.json()["id"] != by_token.json()["id"]


# ------------------------------------------------------------------------------ 6: input edges


def invalid(response: Any, field: str) -> None:
    body = problem_of(response, 422, "invalid_argument")
    assert field in response.text, body


@pytest.mark.parametrize(
    "query", ["job=%00", "requested_by=a%00", "chain_root_id=%00", "since=%00"]
)
def test_nul_in_a_run_filter_is_a_422(api: ApiServer, query: str) -> None:
    with api.client("viewer") as c:
        invalid(c.get(f"/api/v1/runs?{query}"), query.split("=")[0])


def test_nul_in_a_path_is_a_422(api: ApiServer) -> None:
    with api.client("operator") as c:
        invalid(c.post("/api/v1/runs/aaaaaa%00/cancel"), "run_id")
        invalid(c.get("/api/v1/runs/aaaaaa%00"), "run_id")
        invalid(c.post("/api/v1/jobs/hel%00lo/pause", json={}), "job")


@pytest.mark.parametrize(
    "raw",
    [
        '{"reason": "stop\\u0000now"}',
        '{"reason": "\\ud800"}',
        '{"reason": "' + "r" * 501 + '"}',
        '{"until": "2h\\u0000"}',
    ],
    ids=["nul", "surrogate", "too-long", "until-nul"],
)
def test_a_pause_reason_the_database_cannot_store_is_a_422(api: ApiServer, raw: str) -> None:
    with api.client("operator") as c:
        answer = c.post(
            "/api/v1/jobs/etl.load/pause",
            content=raw,
            headers={"content-type": "application/json"},
        )
        invalid(answer, "/" + raw.split('"')[1])
        ok = c.post("/api/v1/jobs/etl.load/pause", json={"reason": "r" * 500})
        c.post("/api/v1/jobs/etl.load/resume")
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    "body",
    [
        {"key": "k" * 201},
        {"key": "greet", "id": "i" * 201},
        {"key": "greet", "id": "a\x00"},
        {"key": "greet", "id": "\ud800"},
        {"key": ""},
    ],
    ids=["long-key", "long-id", "nul-id", "surrogate-id", "empty-key"],
)
def test_an_event_key_or_id_past_its_cap_is_a_422_bad_event(
    api: ApiServer, body: dict[str, Any]
) -> None:
    # The code every face gives (the operation's `emit`: the CLI, MCP), not the body schema's
    # `invalid_argument`.
    sent = json.dumps(body)  # ASCII: a lone surrogate goes as `\ud800`
    with api.client("operator", **{"content-type": "application/json"}) as c:
        problem_of(c.post("/api/v1/events", content=sent), 422, "bad_event")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_deeply_nested_params_are_a_422_with_or_without_a_key(api: ApiServer) -> None:
    body = {"params": {"deep": nested(700)}}
    with api.client("operator", **{"Idempotency-Key": uuid.uuid4().hex}) as c:
        keyed = c.post("/api/v1/jobs/hello/runs", json=body)
    with api.client("operator") as c:
        plain = c.post("/api/v1/jobs/hello/runs", json=body)
    for answer in (keyed, plain):
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] in {"invalid_argument", "param_invalid"}


def test_postgres_refusing_a_value_is_invalid_argument(api: ApiServer) -> None:
    if api.dialect != "postgres":
        pytest.skip("SQLite stores NUL and compares it")
    for text in ("a\x00", "\ud800"):
        with pytest.raises(InvalidArgument):
            api.call(lambda rt, text=text: operations.list_runs(rt, requested_by=text))


# ------------------------------------------------------------------------------ 8: events


def test_a_scoped_token_may_not_emit_a_key_nobody_listens_to(api: ApiServer) -> None:
    event_id = uuid.uuid4().hex
    with api.client("etl") as c:
        refused = c.post("/api/v1/events", json={"key": "unheard", "id": event_id})
    body = problem_of(refused, 403, "forbidden")
    assert "no job listens" in body["detail"]
    with api.client("admin") as c:
        later = c.post("/api/v1/events", json={"key": "greet", "id": event_id})
        unheard = c.post("/api/v1/events", json={"key": "unheard"})
    assert later.status_code == 200, later.text
    assert unheard.status_code == 200, unheard.text  # an unscoped token still may
