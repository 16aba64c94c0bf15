"""Access control through the operations every face calls, on SQLite and PostgreSQL: tokens
(create, list, revoke, authenticate), the audit log, idempotency keys, and the role and job-glob
check of every write operation (allowed, refused, and a refusal writes nothing)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane.core.access import Access, Role
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import (
    Forbidden,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    InvalidArgument,
    OverlapRefused,
    TokenExists,
    Unauthenticated,
    UnknownToken,
)
from runlane.ports import RunFilter, Store
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.operations.tokens import hash_secret
from runlane.service.runtime import Runtime
from runlane.service.wiring import store_from_url
from runlane.testing.clock import FixedClock

PY = sys.executable
LOCAL = Requester("alice", Trigger.CLI)  # the local CLI: no access = every right
ADMIN = Requester("root", Trigger.MANUAL, Access(Role.ADMIN))
OPERATOR = Requester("ops", Trigger.MANUAL, Access(Role.OPERATOR))
VIEWER = Requester("dash", Trigger.MANUAL, Access(Role.VIEWER))
ETL_ONLY = Requester("etl-ci", Trigger.MANUAL, Access(Role.OPERATOR, ("etl.*",)))

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  etl.load:
    command: [{PY}, -c, "pass"]
    on_event: [{{key: data.ready}}]
  etl.clean:
    command: [{PY}, -c, "pass"]
  backup:
    command: [{PY}, -c, "pass"]
    on_event: [{{key: data.ready}}, {{key: nightly}}]
chains:
  etl:
    steps:
      load: {{job: etl.load}}
      clean: {{job: etl.clean, after: [{{step: load, on: success}}]}}
  mixed:
    steps:
      load: {{job: etl.load}}
      save: {{job: backup, after: [{{step: load, on: success}}]}}
"""


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


# --- tokens -----------------------------------------------------------------------------------


async def test_a_created_token_authenticates_with_its_role_and_globs(rt: Runtime) -> None:
    made = await operations.create_token(
        rt, "etl-ci", role="operator", jobs=["etl.*"], requester=LOCAL
    )
    assert made.secret.startswith("rl_")
    assert len(made.secret) >= 3 + 43  # 256 bits, URL-safe base64
    assert made.token.prefix == made.secret[:10]
    assert made.token.created_by == "alice"
    who = await operations.authenticate(rt, made.secret)
    assert who.name == "etl-ci"
    assert who.trigger is Trigger.MANUAL
    assert who.access == Access(Role.OPERATOR, ("etl.*",))
    (listed,) = await operations.list_tokens(rt, requester=LOCAL)
    assert listed.name == "etl-ci"
    assert listed.last_used_at is not None  # touched by the authentication


async def test_the_database_holds_only_the_hash_of_a_secret(rt: Runtime, store: Store) -> None:
    made = await operations.create_token(rt, "ci", role=Role.VIEWER, requester=LOCAL)
    (record,) = await store.tokens()
    assert record.secret_hash == hash_secret(made.secret)
    assert made.secret not in repr(record)
    assert made.secret[10:] not in repr(await operations.list_tokens(rt, requester=LOCAL))


async def test_bad_secrets_are_refused_with_one_message(rt: Runtime) -> None:
    made = await operations.create_token(rt, "ci", role="viewer", requester=LOCAL)
    with pytest.raises(Unauthenticated, match="Authorization: Bearer"):
        await operations.authenticate(rt, None)
    messages = set()
    for secret in ("rl_nothing", "not-a-token", made.secret + "x"):
        with pytest.raises(Unauthenticated) as caught:
            await operations.authenticate(rt, secret)
        messages.add(caught.value.message)
    await operations.revoke_token(rt, "ci", requester=ADMIN)
    with pytest.raises(Unauthenticated) as caught:
        await operations.authenticate(rt, made.secret)
    messages.add(caught.value.message)
    assert len(messages) == 1  # unknown and revoked read the same


async def test_token_arguments_are_checked(rt: Runtime) -> None:
    for name in ("", "a b", "x" * 65, "ci/1"):
        with pytest.raises(InvalidArgument, match="token name"):
            await operations.create_token(rt, name, role="viewer", requester=LOCAL)
    with pytest.raises(InvalidArgument, match="--role 'root'"):
        await operations.create_token(rt, "ci", role="root", requester=LOCAL)
    with pytest.raises(InvalidArgument, match="--jobs"):
        await operations.create_token(rt, "ci", role="viewer", jobs=[""], requester=LOCAL)
    for expires in ("0s", "2001-01-01T00:00Z", "soon"):
        with pytest.raises(InvalidArgument, match="--expires"):
            await operations.create_token(rt, "ci", role="viewer", expires=expires, requester=LOCAL)
    assert await operations.list_tokens(rt, requester=LOCAL) == ()
    made = await operations.create_token(rt, "ci", role="viewer", expires="30d", requester=LOCAL)
    assert made.token.expires_at is not None
    assert made.token.created_at is not None
    assert 29.9 < (made.token.expires_at - made.token.created_at).total_seconds() / 86400 < 30.1
    with pytest.raises(TokenExists):
        await operations.create_token(rt, "ci", role="viewer", requester=LOCAL)
    with pytest.raises(UnknownToken):
        await operations.revoke_token(rt, "nobody", requester=LOCAL)


async def test_only_admins_manage_tokens(rt: Runtime) -> None:
    for who in (OPERATOR, VIEWER, ETL_ONLY):
        with pytest.raises(Forbidden, match="needs the admin role"):
            await operations.create_token(rt, "new", role="admin", requester=who)
        with pytest.raises(Forbidden):
            await operations.list_tokens(rt, requester=who)
        with pytest.raises(Forbidden):
            await operations.revoke_token(rt, "new", requester=who)
    assert await operations.list_tokens(rt, requester=ADMIN) == ()
    made = await operations.create_token(rt, "new", role="viewer", requester=ADMIN)
    assert made.token.created_by == "root"


# --- the audit log ----------------------------------------------------------------------------


async def test_the_audit_log_lists_newest_first_in_pages(rt: Runtime) -> None:
    for n in range(5):
        await operations.record_audit(
            rt,
            requester=OPERATOR,
            action="run_job",
            target=f"job{n}",
            outcome="ok" if n % 2 == 0 else "forbidden",
            remote="192.0.2.7",
        )
    first = await operations.list_audit(rt, limit=3)
    assert [e.target for e in first.items] == ["job4", "job3", "job2"]
    assert first.items[0].actor == "ops"
    assert first.items[1].outcome == "forbidden"
    assert first.items[0].remote == "192.0.2.7"
    assert first.next_cursor is not None
    rest = await operations.list_audit(rt, limit=3, before=first.next_cursor)
    assert [e.target for e in rest.items] == ["job1", "job0"]
    assert rest.next_cursor is None
    with pytest.raises(InvalidArgument, match="cursor"):
        await operations.list_audit(rt, before="x")
    with pytest.raises(InvalidArgument, match="--limit"):
        await operations.list_audit(rt, limit=0)


async def test_a_refusal_whose_target_the_database_cannot_store_is_still_audited(
    rt: Runtime,
) -> None:
    """A refused request naming text the database cannot store (U+0000, a lone surrogate: an
    MCP tool's arguments arrive as sent) lost its audit row on PostgreSQL (`audit_failed` in
    the log). The row is kept, with U+FFFD in their place."""

    async def refused() -> None:
        raise InvalidArgument("no")

    for target in ("abc\x00def", "abc\ud800def"):
        with pytest.raises(InvalidArgument):
            await operations.audited(
                rt, OPERATOR, action="cancel", target=target, remote=None, call=refused
            )
    page = await operations.list_audit(rt, limit=2)
    assert [(e.target, e.outcome) for e in page.items] == [
        ("abc\ufffddef", "invalid_argument"),
        ("abc\ufffddef", "invalid_argument"),
    ]


# --- idempotency keys -------------------------------------------------------------------------


async def test_a_key_replays_the_first_answer(rt: Runtime) -> None:
    calls: list[int] = []

    async def action() -> tuple[int, dict[str, Any]]:
        calls.append(1)
        return 201, {"id": f"run-{len(calls)}"}

    fp = operations.request_fingerprint("POST", "/api/v1/jobs/x/runs", {"params": {"a": 1}})
    first = await operations.idempotent(rt, owner="ops", key="k-1", fingerprint=fp, action=action)
    again = await operations.idempotent(rt, owner="ops", key="k-1", fingerprint=fp, action=action)
    assert (first.status, first.body, first.replayed) == (201, {"id": "run-1"}, False)
    assert (again.status, again.body, again.replayed) == (201, {"id": "run-1"}, True)
    assert calls == [1]
    # Key order and spacing of the body do not make another request; another body does.
    same = operations.request_fingerprint("post", "/api/v1/jobs/x/runs", {"params": {"a": 1}})
    assert same == fp
    other = operations.request_fingerprint("POST", "/api/v1/jobs/x/runs", {"params": {"a": 2}})
    with pytest.raises(IdempotencyKeyReused):
        await operations.idempotent(rt, owner="ops", key="k-1", fingerprint=other, action=action)
    # Keys are per owner.
    theirs = await operations.idempotent(
        rt, owner="ci", key="k-1", fingerprint=other, action=action
    )
    assert theirs.replayed is False
    assert calls == [1, 1]


async def test_a_failed_request_releases_its_key(rt: Runtime) -> None:
    async def refused() -> tuple[int, dict[str, Any]]:
        raise OverlapRefused("busy", active_run_id="r1")

    async def works() -> tuple[int, dict[str, Any]]:
        return 201, {"ok": True}

    with pytest.raises(OverlapRefused):
        await operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=refused)
    done = await operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=works)
    assert done == operations.Replayable(201, {"ok": True}, replayed=False)


async def test_a_key_in_flight_refuses_a_second_request(rt: Runtime) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow() -> tuple[int, dict[str, Any]]:
        entered.set()
        await release.wait()
        return 202, {"n": 1}

    first = asyncio.create_task(
        operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=slow)
    )
    await entered.wait()
    with pytest.raises(IdempotencyKeyInFlight):
        await operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=slow)
    release.set()
    assert (await first).status == 202
    replay = await operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=slow)
    assert replay.replayed


@pytest.mark.parametrize("key", ["", "k" * 256, "caf\u00e9", "tab\there"])
async def test_a_key_must_be_printable_ascii(rt: Runtime, key: str) -> None:
    async def never() -> tuple[int, dict[str, Any]]:
        raise AssertionError("not called")

    with pytest.raises(InvalidArgument, match="Idempotency-Key"):
        await operations.idempotent(rt, owner="o", key=key, fingerprint="f", action=never)


# --- the check of every write operation ------------------------------------------------------


async def nothing_written(store: Store) -> None:
    """No run, chain run, event or pause exists: a refused write wrote nothing."""
    assert await store.list_runs(RunFilter(limit=10)) == []
    assert await store.list_chain_runs(limit=10) == []
    assert await store.list_events(limit=10) == []
    assert await store.overrides() == {}


async def test_a_viewer_writes_nothing(rt: Runtime, store: Store) -> None:
    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: operations.run_job(rt, "etl.load", requester=VIEWER),
        lambda: operations.run_chain(rt, "etl", requester=VIEWER),
        lambda: operations.emit(rt, "data.ready", requester=VIEWER),
        lambda: operations.pause_job(rt, "etl.load", requester=VIEWER),
        lambda: operations.resume_job(rt, "etl.load", requester=VIEWER),
    ]
    for attempt in attempts:
        with pytest.raises(Forbidden, match=r"needs the operator role.*'dash' has the viewer"):
            await attempt()
    await nothing_written(store)


async def test_globs_limit_which_jobs_a_token_writes(rt: Runtime, store: Store) -> None:
    refused: list[Callable[[], Awaitable[object]]] = [
        lambda: operations.run_job(rt, "backup", requester=ETL_ONLY),
        lambda: operations.run_chain(rt, "mixed", requester=ETL_ONLY),  # a step runs backup
        lambda: operations.emit(rt, "data.ready", requester=ETL_ONLY),  # backup listens too
        lambda: operations.emit(rt, "nightly", requester=ETL_ONLY),
        lambda: operations.pause_job(rt, "backup", requester=ETL_ONLY),
        lambda: operations.resume_job(rt, "backup", requester=ETL_ONLY),
    ]
    for attempt in refused:
        with pytest.raises(Forbidden, match=r"'backup'.*etl\.\*"):
            await attempt()
    await nothing_written(store)

    queued = await operations.run_job(rt, "etl.load", requester=ETL_ONLY)
    assert queued.run.requested_by == "etl-ci"
    started = await operations.run_chain(rt, "etl", requester=ETL_ONLY)
    assert started.view.run.requested_by == "etl-ci"
    paused = await operations.pause_job(rt, "etl.clean", requester=ETL_ONLY)
    assert paused.created_by == "etl-ci"
    assert (await operations.resume_job(rt, "etl.clean", requester=ETL_ONLY)).was_paused


async def test_cancel_checks_the_job_of_the_run(rt: Runtime, store: Store) -> None:
    backup = (await operations.run_job(rt, "backup", requester=LOCAL)).run
    load = (await operations.run_job(rt, "etl.load", requester=LOCAL)).run
    with pytest.raises(Forbidden, match="needs the operator role"):
        await operations.cancel(rt, load.id, requester=VIEWER)
    with pytest.raises(Forbidden, match="'backup'"):
        await operations.cancel(rt, backup.id, requester=ETL_ONLY)
    assert (await store.get_run(backup.id)).status is RunStatus.QUEUED
    done = await operations.cancel(rt, load.id, requester=ETL_ONLY)
    assert isinstance(done, operations.CancelledRun)
    assert done.run.status is RunStatus.CANCELLED


async def test_cancel_of_a_chain_run_checks_every_step_job(rt: Runtime, store: Store) -> None:
    mixed = (await operations.run_chain(rt, "mixed", requester=LOCAL)).view.run
    etl = (await operations.run_chain(rt, "etl", requester=LOCAL)).view.run
    with pytest.raises(Forbidden, match="'backup'"):
        await operations.cancel(rt, mixed.id, requester=ETL_ONLY)
    assert (await store.get_chain_run(mixed.id)).status == "running"
    done = await operations.cancel(rt, etl.id, requester=ETL_ONLY)
    assert isinstance(done, operations.CancelledChainRun)
    assert done.chain_run.status == "failure"
    done = await operations.cancel(rt, mixed.id, requester=OPERATOR)
    assert isinstance(done, operations.CancelledChainRun)


async def test_operators_and_admins_write_every_job(rt: Runtime) -> None:
    for who in (OPERATOR, ADMIN):
        emitted = await operations.emit(rt, "data.ready", requester=who, event_id=who.name)
        assert {r.run.job for r in emitted.runs} == {"etl.load", "backup"}
        queued = await operations.run_job(rt, "backup", requester=who)
        assert queued.created


async def test_a_key_left_in_flight_by_a_dead_process_is_taken_over(
    rt: Runtime, store: Store
) -> None:
    async def works() -> tuple[int, dict[str, Any]]:
        return 201, {"ok": True}

    # A reservation its process never completed nor released, from long enough ago.
    store_now = await store.now()
    store_pinned = await _pinned_store(rt, store_now - timedelta(hours=2))
    assert (
        await store_pinned.reserve_key("o", "k", "f", reservation="dead", ttl=86400, abandoned=60)
        is None
    )
    await store_pinned.close()
    done = await operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=works)
    assert done.replayed is False
    assert done.status == 201


async def test_a_slow_request_leaves_alone_the_key_its_retry_took_over(
    rt: Runtime, store: Store
) -> None:
    """The first request runs past the takeover window (its reservation made two hours ago,
    by its store's clock); its retry takes the key over. When the first then fails, it must
    not release the retry's reservation: a third request would run while the retry does."""
    past = await _pinned_store(rt, (await store.now()) - timedelta(hours=2))
    slow_rt = Runtime(settings=rt.settings, store=past, catalog=rt.catalog)
    retry_inside = asyncio.Event()
    retry_go = asyncio.Event()
    ran: list[str] = []

    async def retry_action() -> tuple[int, dict[str, Any]]:
        ran.append("retry")
        retry_inside.set()
        await retry_go.wait()
        return 201, {"by": "retry"}

    async def third_action() -> tuple[int, dict[str, Any]]:
        ran.append("third")
        return 201, {"by": "third"}

    retry: list[asyncio.Task[operations.Replayable]] = []

    async def slow_action() -> tuple[int, dict[str, Any]]:
        ran.append("slow")
        retry.append(
            asyncio.create_task(
                operations.idempotent(rt, owner="o", key="k", fingerprint="f", action=retry_action)
            )
        )
        await retry_inside.wait()
        raise InvalidArgument("the slow request fails at last")

    try:
        async with asyncio.timeout(10):
            with pytest.raises(InvalidArgument):
                await operations.idempotent(
                    slow_rt, owner="o", key="k", fingerprint="f", action=slow_action
                )
            with pytest.raises(IdempotencyKeyInFlight):
                await operations.idempotent(
                    rt, owner="o", key="k", fingerprint="f", action=third_action
                )
            retry_go.set()
            done = await retry[0]
            replay = await operations.idempotent(
                rt, owner="o", key="k", fingerprint="f", action=third_action
            )
    finally:
        retry_go.set()
        await past.close()
    assert ran == ["slow", "retry"]
    assert (done.status, done.body, done.replayed) == (201, {"by": "retry"}, False)
    assert (replay.body, replay.replayed) == ({"by": "retry"}, True)


async def _pinned_store(rt: Runtime, at: datetime) -> Store:
    pinned = store_from_url(rt.settings.database_url, clock=FixedClock(at))
    await pinned.open()
    return pinned


async def test_an_expired_token_is_refused(rt: Runtime, store: Store) -> None:
    now = await store.now()
    then = await _pinned_store(rt, now + timedelta(hours=2))
    try:
        made = await operations.create_token(
            rt, "brief", role="viewer", expires="1h", requester=LOCAL
        )
        assert (await operations.authenticate(rt, made.secret)).name == "brief"
        later = Runtime(settings=rt.settings, store=then, catalog=rt.catalog)
        with pytest.raises(Unauthenticated, match="not valid"):
            await operations.authenticate(later, made.secret)
    finally:
        await then.close()
