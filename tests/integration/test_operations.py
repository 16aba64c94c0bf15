"""The operations every face calls (`runlane.service.operations`), through the library on real
stores (SQLite and PostgreSQL): typed results, the notices decided once, and the stable error
codes of docs/errors.md."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane.catalog import Catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import (
    AmbiguousId,
    ConfirmationRequired,
    InvalidArgument,
    NotCancellable,
    OverlapRefused,
    ParamError,
    RunlaneError,
    UnknownChain,
    UnknownChainRun,
    UnknownJob,
    UnknownRun,
)
from runlane.ports import Heartbeat, NewChainRun, RunFilter, Store
from runlane.service import operations
from runlane.service.accept import RunRequest, prepare_run
from runlane.service.config import Settings
from runlane.service.operations import (
    OutputBytes,
    OutputText,
    Requester,
    RunEnded,
)
from runlane.service.runtime import Runtime
from tests.support.waiting import eventually

from .conftest import Running

PY = sys.executable
ALICE = Requester("alice", Trigger.CLI)

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "print('hello from the run')"]
    schedules: [{{cron: "0 * * * *"}}]
    on_event: [{{key: greet}}]
  typed:
    command: [{PY}, -c, "pass"]
    params: {{count: int}}
  careful:
    command: [{PY}, -c, "print('acted')"]
    acts: true
  single:
    command: [{PY}, -c, "pass"]
    overlap: forbid
chains:
  pair:
    steps:
      first: {{job: hello}}
      second: {{job: single, after: [{{step: first, on: success}}]}}
"""


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


async def beat(store: Store, launcher_id: str = "L1", jobs: tuple[str, ...] | None = None) -> None:
    now = await store.now()
    await store.beat(
        Heartbeat(
            launcher_id,
            socket.gethostname(),
            1,
            "test",
            now,
            heartbeat_interval=60.0,
            catalog_jobs=jobs,
        )
    )


def codes(notices: tuple[operations.Notice, ...]) -> list[str]:
    return [n.code for n in notices]


# ------------------------------------------------------------------------------ run now


async def test_run_job_queues_a_run_and_warns_when_no_launcher_runs(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    assert queued.created
    assert (queued.run.status, queued.run.trigger, queued.run.requested_by) == (
        RunStatus.QUEUED,
        "cli",
        "alice",
    )
    assert codes(queued.warnings) == ["no_launcher"]


async def test_a_fresh_heartbeat_silences_the_no_launcher_warning(
    rt: Runtime, store: Store
) -> None:
    await beat(store)
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    assert queued.warnings == ()


async def test_live_launchers_that_lack_the_job_are_said(rt: Runtime, store: Store) -> None:
    await beat(store, jobs=("typed",))
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    assert codes(queued.warnings) == ["launchers_lack_job"]
    assert queued.run.id in queued.warnings[0].message


async def test_the_api_and_mcp_faces_pass_their_own_trigger_and_name(rt: Runtime) -> None:
    api = await operations.run_job(rt, "hello", requester=Requester("token:ci", Trigger.MANUAL))
    mcp = await operations.run_job(rt, "hello", requester=Requester("claude", Trigger.MCP))
    assert (api.run.trigger, api.run.requested_by) == ("manual", "token:ci")
    assert (mcp.run.trigger, mcp.run.requested_by) == ("mcp", "claude")


@pytest.mark.parametrize(
    ("job", "kwargs", "error", "code", "exit_code"),
    [
        ("nosuch", {}, UnknownJob, "unknown_job", 2),
        ("typed", {"params": {"count": "many"}}, ParamError, "param_invalid", 2),
        ("typed", {"params": {"count": 1, "other": 2}}, ParamError, "param_invalid", 2),
        ("careful", {}, ConfirmationRequired, "confirmation_required", 2),
    ],
)
async def test_run_job_refusals_carry_their_codes(
    rt: Runtime,
    store: Store,
    job: str,
    kwargs: dict[str, Any],
    error: type[RunlaneError],
    code: str,
    exit_code: int,
) -> None:
    with pytest.raises(error) as refused:
        await operations.run_job(rt, job, requester=ALICE, **kwargs)
    assert (refused.value.code, refused.value.exit_code) == (code, exit_code)
    assert await store.list_runs(RunFilter(limit=10)) == []


async def test_params_from_the_cli_are_text_and_coerced(rt: Runtime) -> None:
    queued = await operations.run_job(
        rt, "typed", requester=ALICE, params={"count": "3"}, params_from_strings=True
    )
    assert queued.run.params == {"count": 3}


async def test_a_confirmed_acting_job_is_queued(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "careful", requester=ALICE, confirmed=True)
    assert queued.run.status is RunStatus.QUEUED


async def test_typing_the_jobs_name_confirms_and_another_name_does_not(rt: Runtime) -> None:
    """The API, UI and MCP pass the name the person typed; only the job's own name confirms."""
    for typed in ("Careful", "careful ", "other", ""):
        with pytest.raises(ConfirmationRequired):
            await operations.run_job(rt, "careful", requester=ALICE, confirm=typed)
    queued = await operations.run_job(rt, "careful", requester=ALICE, confirm="careful")
    assert queued.run.status is RunStatus.QUEUED


async def test_overlap_forbid_refuses_with_the_active_run_id(rt: Runtime) -> None:
    first = await operations.run_job(rt, "single", requester=ALICE)
    with pytest.raises(OverlapRefused) as refused:
        await operations.run_job(rt, "single", requester=ALICE)
    assert refused.value.code == "overlap_refused"
    assert refused.value.exit_code == 3
    assert refused.value.active_run_id == first.run.id


# ------------------------------------------------------------------------------ runs


async def test_show_run_by_prefix_and_its_refusals(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    assert (await operations.show_run(rt, queued.run.id[:8].upper())).id == queued.run.id
    with pytest.raises(UnknownRun) as unknown:
        await operations.show_run(rt, "abcdef")
    assert (unknown.value.code, unknown.value.message) == ("unknown_run", "no run with id 'abcdef'")
    with pytest.raises(InvalidArgument) as short:
        await operations.show_run(rt, "ab")
    assert short.value.code == "invalid_argument"


async def test_an_ambiguous_prefix_is_refused(rt: Runtime, store: Store, catalog: Catalog) -> None:
    for run_id in ("abcdef01-0000-4000-8000-000000000000", "abcdef02-0000-4000-8000-000000000000"):
        new, _ = prepare_run(catalog, RunRequest(job="hello", trigger=Trigger.CLI))
        await store.accept(replace(new, id=run_id), overlap_action="none")
    with pytest.raises(AmbiguousId) as ambiguous:
        await operations.show_run(rt, "ABCDEF")
    assert (ambiguous.value.code, ambiguous.value.exit_code) == ("ambiguous_id", 1)
    assert ambiguous.value.message == "run id prefix 'ABCDEF' is ambiguous (2 runs)"
    assert (await operations.show_run(rt, "abcdef02")).id.startswith("abcdef02")


async def test_a_cancel_by_a_prefix_of_several_runs_is_refused_not_taken_for_a_chain_run(
    rt: Runtime, store: Store, catalog: Catalog
) -> None:
    """`AmbiguousId` is a `NotFound`: `cancel` took a prefix of two runs for "no run" and went
    on to the chain runs, cancelling the one chain run the prefix also begins."""
    for run_id in ("abcdef01-0000-4000-8000-000000000000", "abcdef02-0000-4000-8000-000000000000"):
        new, _ = prepare_run(catalog, RunRequest(job="hello", trigger=Trigger.CLI))
        await store.accept(replace(new, id=run_id), overlap_action="none")
    chain_run_id = "abcdef03-0000-5000-8000-000000000000"
    await store.create_chain_run(
        NewChainRun(id=chain_run_id, chain="pair", dedupe_key=chain_run_id, trigger="cli")
    )
    with pytest.raises(AmbiguousId) as ambiguous:
        await operations.cancel(rt, "abcdef", requester=ALICE)
    assert ambiguous.value.message == "run id prefix 'abcdef' is ambiguous (2 runs)"
    assert (await store.get_chain_run(chain_run_id)).status == "running"
    assert {r.status for r in await store.list_runs(RunFilter(job="hello"))} == {RunStatus.QUEUED}
    # The chain run by a prefix only it begins is still cancelled.
    ended = await operations.cancel(rt, "abcdef03", requester=ALICE)
    assert (await store.get_chain_run(chain_run_id)).status == "failure"
    assert ended is not None
    # No run, two chain runs: the chain run prefix is the ambiguous one, not "no run".
    for n in (4, 5):
        other = f"abcde1f{n}-0000-5000-8000-000000000000"
        await store.create_chain_run(
            NewChainRun(id=other, chain="pair", dedupe_key=other, trigger="cli")
        )
    with pytest.raises(AmbiguousId) as chains:
        await operations.cancel(rt, "abcde1f", requester=ALICE)
    assert chains.value.message == "chain run id prefix 'abcde1f' is ambiguous (2 chain runs)"


async def test_a_prefix_finds_a_run_however_old_and_counts_every_match(
    rt: Runtime, store: Store, catalog: Catalog
) -> None:
    # The oldest run, then 600 newer ones: a prefix is matched against the whole run log, not
    # the newest few hundred rows (the lookup before read the 500 newest and matched there, so
    # this run was "unknown" and a prefix shared with it "unique").
    async def accept(run_id: str) -> None:
        new, _ = prepare_run(catalog, RunRequest(job="hello", trigger=Trigger.CLI))
        await store.accept(replace(new, id=run_id), overlap_action="none")

    old = "0abcde00-0000-4000-8000-000000000000"
    await accept(old)
    for i in range(600):
        await accept(f"{0xF0000000 + i:08x}-0000-4000-8000-000000000000")
    assert (await operations.show_run(rt, "0ABCDE00")).id == old
    await accept("0abcde01-0000-4000-8000-000000000000")  # now the newest run
    with pytest.raises(AmbiguousId) as both:
        await operations.show_run(rt, "0abcde0")
    assert both.value.message == "run id prefix '0abcde0' is ambiguous (2 runs)"
    with pytest.raises(AmbiguousId) as many:
        await operations.show_run(rt, "f00000")
    assert many.value.message == "run id prefix 'f00000' is ambiguous (more than 10 runs)"
    # Hyphens where a UUID has them are part of a prefix; anything else can begin no id.
    assert (await operations.show_run(rt, "0abcde00-0000-4")).id == old
    for unknown in ("0abcde00-x", "0abcdez", "0abcde000", f"{old}0", old.replace("0a", "1a")):
        with pytest.raises(UnknownRun) as refused:
            await operations.show_run(rt, unknown)
        assert refused.value.message == f"no run with id {unknown!r}"


async def test_an_id_no_database_can_parse_is_an_unknown_run(rt: Runtime) -> None:
    # Python's uuid.UUID takes these (int() reads non-ASCII digits and underscores; it strips
    # "urn:uuid:"), PostgreSQL's uuid input refuses them: an unknown run, not a database error.
    for odd in ("\u0660" * 32, "0000_000" + "0" * 24, "urn:uuid:" + "0" * 32):
        with pytest.raises(UnknownRun) as refused:
            await operations.show_run(rt, odd)
        assert refused.value.message == f"no run with id {odd!r}"
        with pytest.raises(UnknownChainRun):
            await operations.show_chain_run(rt, odd)


async def test_a_chain_run_id_given_for_a_run_says_it_is_a_chain_run(
    rt: Runtime, store: Store
) -> None:
    chain_run_id = "c4a1e5aa-0000-5000-8000-000000000000"
    await store.create_chain_run(
        NewChainRun(id=chain_run_id, chain="pair", dedupe_key=chain_run_id, trigger="cli")
    )
    for given in (chain_run_id, "C4A1E5AA"):
        with pytest.raises(UnknownRun) as refused:
            await operations.show_run(rt, given)
        assert refused.value.code == "unknown_run"
        assert refused.value.message.startswith(f"no run with id {given!r}: it is a chain run's")
        assert "chain show" in refused.value.message


async def test_a_chain_run_prefix_is_matched_over_every_chain_run(
    rt: Runtime, store: Store
) -> None:
    for n in range(1, 13):  # c0ffee01 … c0ffee12
        chain_run_id = f"c0ffee{n:02d}-0000-5000-8000-000000000000"
        await store.create_chain_run(
            NewChainRun(id=chain_run_id, chain="pair", dedupe_key=chain_run_id, trigger="cli")
        )
    assert (await operations.show_chain_run(rt, "C0FFEE12")).run.id.startswith("c0ffee12")
    with pytest.raises(AmbiguousId) as nine:
        await operations.show_chain_run(rt, "c0ffee0")
    assert nine.value.message == "chain run id prefix 'c0ffee0' is ambiguous (9 chain runs)"
    with pytest.raises(AmbiguousId) as twelve:
        await operations.show_chain_run(rt, "c0ffee")
    assert twelve.value.message == (
        "chain run id prefix 'c0ffee' is ambiguous (more than 10 chain runs)"
    )
    with pytest.raises(UnknownChainRun):
        await operations.show_chain_run(rt, "c0ffee13-0000-5000-8000-000000000000")


async def test_list_runs_checks_its_limit_and_status(rt: Runtime) -> None:
    await operations.run_job(rt, "hello", requester=ALICE)
    assert len(await operations.list_runs(rt, status="queued")) == 1
    assert await operations.list_runs(rt, status=RunStatus.SUCCESS) == ()
    for limit in (0, 10_001):
        with pytest.raises(InvalidArgument, match="expected a whole number from 1 to 10000"):
            await operations.list_runs(rt, limit=limit)
    with pytest.raises(InvalidArgument, match="expected one of"):
        await operations.list_runs(rt, status="done")


async def test_cancel_a_queued_run_then_again_is_not_cancellable(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    done = await operations.cancel(rt, queued.run.id, requester=ALICE)
    assert isinstance(done, operations.CancelledRun)
    assert done.run.status is RunStatus.CANCELLED
    with pytest.raises(NotCancellable) as again:
        await operations.cancel(rt, queued.run.id, requester=ALICE)
    assert (again.value.code, again.value.exit_code) == ("not_cancellable", 1)


async def test_cancel_of_an_unknown_id_is_unknown_run(rt: Runtime) -> None:
    with pytest.raises(UnknownRun):
        await operations.cancel(rt, "abcdef12", requester=ALICE)


# ------------------------------------------------------------------------------ chains


async def test_run_chain_starts_its_first_step_and_cancel_ends_it(rt: Runtime) -> None:
    started = await operations.run_chain(rt, "pair", requester=ALICE)
    assert codes(started.warnings) == ["no_launcher"]
    assert [(s.step, s.status) for s in started.view.steps] == [
        ("first", "queued"),
        ("second", "pending"),
    ]
    chain_run = started.view.run
    assert (chain_run.requested_by, chain_run.trigger) == ("alice", "cli")
    shown = await operations.show_chain_run(rt, chain_run.id[:8])
    assert shown.run.id == chain_run.id
    listed = await operations.list_chain_runs(rt, limit=5)
    assert [v.run.id for v in listed] == [chain_run.id]
    done = await operations.cancel(rt, chain_run.id, requester=ALICE)
    assert isinstance(done, operations.CancelledChainRun)
    assert [s.status for s in done.steps] == [RunStatus.CANCELLED]
    with pytest.raises(NotCancellable):
        await operations.cancel(rt, chain_run.id, requester=ALICE)


async def test_the_catalogs_chains_with_their_steps(rt: Runtime) -> None:
    (pair,) = await operations.list_chains(rt)
    assert (pair.name, pair.schedule) == ("pair", None)
    assert [(s.step, s.job, s.after) for s in pair.steps] == [
        ("first", "hello", ()),
        ("second", "single", (("first", "success"),)),
    ]
    assert await operations.show_chain(rt, "pair") == pair
    with pytest.raises(UnknownChain):
        await operations.show_chain(rt, "nosuch")


async def test_chain_refusals(rt: Runtime) -> None:
    with pytest.raises(UnknownChain) as unknown:
        await operations.run_chain(rt, "nosuch", requester=ALICE)
    assert (unknown.value.code, unknown.value.exit_code) == ("unknown_chain", 2)
    assert "(chains: pair)" in unknown.value.message
    with pytest.raises(UnknownChainRun) as no_run:
        await operations.show_chain_run(rt, "abcdef")
    assert no_run.value.code == "unknown_chain_run"
    with pytest.raises(InvalidArgument):
        await operations.list_chain_runs(rt, limit=0)


# ------------------------------------------------------------------------------ events


async def test_emit_starts_the_listener_and_says_no_launcher(rt: Runtime) -> None:
    emitted = await operations.emit(rt, "greet", {"who": "ops"}, requester=ALICE, event_id="e1")
    assert emitted.created
    assert [link.job for link in emitted.links] == ["hello"]
    assert codes(emitted.warnings) == ["no_launcher"]
    again = await operations.emit(rt, "greet", {"who": "ops"}, requester=ALICE, event_id="e1")
    assert not again.created


async def test_emit_of_a_key_nobody_listens_to_warns_of_nothing(rt: Runtime) -> None:
    emitted = await operations.emit(rt, "nobody.listens", requester=ALICE)
    assert (emitted.links, emitted.warnings) == ((), ())


# ------------------------------------------------------------------------------ jobs


async def test_pause_snooze_resume_and_the_jobs_table(rt: Runtime, store: Store) -> None:
    paused = await operations.pause_job(rt, "hello", requester=ALICE, reason="maintenance")
    assert (paused.paused_until, paused.created_by, paused.reason) == (
        None,
        "alice",
        "maintenance",
    )
    jobs = {info.name: info for info in await operations.list_jobs(rt)}
    assert set(jobs) == {"hello", "typed", "careful", "single"}
    assert jobs["hello"].pause is not None
    assert jobs["typed"].pause is None
    assert jobs["hello"].schedules == ("0 * * * *",)
    assert set(jobs["typed"].params) == {"count"}
    assert (await operations.resume_job(rt, "hello", requester=ALICE)).was_paused
    assert not (await operations.resume_job(rt, "hello", requester=ALICE)).was_paused
    snoozed = await operations.pause_job(rt, "hello", requester=ALICE, until="2h")
    now = await store.now()
    assert snoozed.paused_until is not None
    assert timedelta(hours=1, minutes=59) < snoozed.paused_until - now <= timedelta(hours=2)


async def test_pause_until_a_past_time_is_refused(rt: Runtime, store: Store) -> None:
    past = (await store.now()) - timedelta(hours=1)
    for until in ("2001-01-01T00:00Z", past, "now-1h"):
        with pytest.raises(InvalidArgument, match="is in the past"):
            await operations.pause_job(rt, "hello", requester=ALICE, until=until)
    with pytest.raises(UnknownJob):
        await operations.pause_job(rt, "nosuch", requester=ALICE)
    assert await store.overrides() == {}


async def test_a_pause_reason_is_capped_and_must_be_storable_for_every_face(
    rt: Runtime, store: Store
) -> None:
    for reason, match in (("r" * 501, "501 characters long"), ("a\x00b", "--reason")):
        with pytest.raises(InvalidArgument, match=match):
            await operations.pause_job(rt, "hello", requester=ALICE, reason=reason)
    assert await store.overrides() == {}
    paused = await operations.pause_job(rt, "hello", requester=ALICE, reason="r" * 500)
    assert paused.reason == "r" * 500


async def test_an_event_key_or_id_past_200_characters_is_refused_for_every_face(
    rt: Runtime, store: Store
) -> None:
    for key, event_id in (("k" * 201, None), ("greet", "i" * 201)):
        with pytest.raises(RunlaneError, match="201 characters long") as refused:
            await operations.emit(rt, key, requester=ALICE, event_id=event_id)
        assert refused.value.code == "bad_event"
    assert await store.list_runs(RunFilter(limit=10)) == []
    emitted = await operations.emit(rt, "greet", requester=ALICE, event_id="i" * 200)
    assert emitted.runs


async def test_show_job_has_its_latest_run(rt: Runtime) -> None:
    assert (await operations.show_job(rt, "hello")).last_run is None
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    shown = await operations.show_job(rt, "hello")
    assert shown.last_run is not None
    assert shown.last_run.id == queued.run.id
    with pytest.raises(UnknownJob):
        await operations.show_job(rt, "nosuch")


async def test_explain_of_a_job_a_chain_and_an_unknown_name(rt: Runtime) -> None:
    job = await operations.explain(rt, "hello", at="now")
    assert job.verdict == "not_planned"
    chain = await operations.explain(rt, "pair")
    assert chain.verdict == "unscheduled"
    with pytest.raises(UnknownJob):
        await operations.explain(rt, "nosuch")
    with pytest.raises(InvalidArgument):
        await operations.explain(rt, "hello", at="yesterday-ish")


# ------------------------------------------------------------------------------ status


async def test_status_and_doctor_without_and_with_a_launcher(rt: Runtime, store: Store) -> None:
    await operations.run_job(rt, "hello", requester=ALICE)
    report = await operations.status(rt)
    assert (report.queued, report.running, report.launchers, report.warnings) == (1, 0, (), ())
    assert report.catalog_digest is not None
    assert report.catalog_error is None
    doctor = await operations.doctor(rt)
    assert any(f.check == "launchers" and f.level == "warning" for f in doctor.findings)
    await beat(store)
    (state,) = await operations.list_launchers(rt)
    assert (state.heartbeat.launcher_id, state.stale, state.catalog_current) == ("L1", False, None)


async def test_the_schedule_table_and_its_checks(settings: Settings, store: Store) -> None:
    table = await operations.schedule_table(
        settings, start="2031-01-01T00:00Z", end="2031-01-01T03:00Z"
    )
    assert [(r.spec.target, r.fires) for r in table.rows] == [("hello", True)] * 3
    assert table.notes == ()
    with pytest.raises(InvalidArgument, match="is not after"):
        await operations.schedule_table(settings, start="2031-01-02T00:00Z", end="2031-01-01")
    with pytest.raises(InvalidArgument, match="ten years"):
        await operations.schedule_table(settings, days=4000)


async def test_the_schedule_table_of_an_open_runtime_shows_its_pauses(rt: Runtime) -> None:
    """A server passes its open runtime: the table is of its catalog, paused by its store."""
    await operations.pause_job(rt, "hello", requester=ALICE, reason="maintenance")
    table = await operations.schedule_table(rt, start="2031-01-01T00:00Z", end="2031-01-01T02:00Z")
    assert [(r.spec.target, r.fires, r.reason) for r in table.rows] == [
        ("hello", False, "paused")
    ] * 2
    assert table.notes == ()


# ------------------------------------------------------------------------------ output


async def test_follow_and_read_the_output_of_a_run(rt: Runtime, start_launcher: Any) -> None:
    launcher: Running = start_launcher()
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    followed = [item async for item in operations.follow_run(rt, queued.run.id)]
    ended = followed[-1]
    assert isinstance(ended, RunEnded)
    assert ended.run.status is RunStatus.SUCCESS
    text = "".join(i.text for i in followed if isinstance(i, OutputText))
    assert text == "hello from the run\n"
    await launcher.stop()
    # Once it has ended: the whole file, byte for byte, and the same again with --follow.
    whole = [item async for item in operations.run_output(rt, queued.run.id[:8])]
    assert whole == [OutputBytes(b"hello from the run\n")]
    again = [item async for item in operations.run_output(rt, queued.run.id, follow=True)]
    assert [type(i) for i in again] == [OutputText, RunEnded]


async def test_a_big_log_file_is_read_in_pieces_never_whole(rt: Runtime) -> None:
    """`runlane logs` and `GET /runs/{id}/logs` read the log file whole: with log_max_bytes up
    to 1 TiB, a viewer could make the server hold a log of any size in memory. It is read in
    pieces, byte for byte, each ending at a character's end (so each decodes on its own)."""
    import hashlib
    import tracemalloc

    queued = await operations.run_job(rt, "hello", requester=ALICE)
    path = Path(rt.settings.log_dir) / f"{queued.run.id}.{queued.run.attempt}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "a line of output with € and é, not ASCII\n".encode()  # pieces cut characters
    data = line * (16 * 1024 * 1024 // len(line)) + b"no newline at the end"
    path.write_bytes(data)
    digest = hashlib.sha256()
    pieces = 0
    tracemalloc.start()
    try:
        async for item in operations.run_output(rt, queued.run.id):
            assert isinstance(item, OutputBytes)
            item.data.decode("utf-8")  # a whole piece of text: raises when it cuts a character
            digest.update(item.data)
            pieces += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert pieces > 1
    assert peak < len(data) // 8, f"{peak} bytes held at once for a log of {len(data)}"


async def test_output_of_a_run_that_never_started_says_how_it_ended(rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    (waiting,) = [item async for item in operations.run_output(rt, queued.run.id)]
    assert isinstance(waiting, operations.Notice)
    assert waiting.code == "no_output_yet"
    await operations.cancel(rt, queued.run.id, requester=ALICE)
    (ended,) = [item async for item in operations.run_output(rt, queued.run.id)]
    assert isinstance(ended, operations.Notice)
    assert ended.code == "no_output"
    assert "it ended cancelled" in ended.message
    followed = [item async for item in operations.follow_run(rt, queued.run.id)]
    assert [type(i) for i in followed] == [RunEnded]


async def test_a_followed_run_whose_launcher_stopped_says_why_it_does_not_move(
    rt: Runtime,
) -> None:
    """A run left `running` by a launcher that was killed, with no launcher running to take it
    over: a follow (`logs -f`, `run --wait`) waited in silence. It says why, and goes on
    following (a launcher may start and take the run over)."""
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    [claimed] = await rt.store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    assert claimed.run.id == queued.run.id
    items: list[Any] = []

    async def follow() -> None:
        async for item in operations.follow_run(rt, queued.run.id):
            items.append(item)

    following = asyncio.create_task(follow())
    try:
        await eventually(lambda: any(isinstance(i, operations.Notice) for i in items), "the notice")
        assert not following.done()  # still following
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    [notice] = [i for i in items if isinstance(i, operations.Notice)]
    assert notice.code == "no_launcher"
    assert "launcher dead-launcher has stopped" in notice.message


async def queued_pod_run(store: Store) -> str:
    """A queued run of `hello` on the pod executor (its pod's log is the test's fake)."""
    import uuid

    from runlane.core.runs import NewRun

    new = NewRun(
        id=str(uuid.uuid4()),
        job="hello",
        trigger=Trigger.CLI,
        dedupe_key=str(uuid.uuid4()),
        executor="pod",
        overlap="allow",
    )
    return (await store.accept(new)).run.id


async def test_a_followed_pod_run_ends_with_its_end(
    rt: Runtime, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's log is followed to its container's end, then the run's end is waited for and
    said (`RunEnded`), as for a local run: without it a client cannot tell the end from a
    dropped connection, and reconnects forever."""
    from runlane.service.operations import logs

    run_id = await queued_pod_run(store)

    async def pod_log(*_: Any, **__: Any) -> Any:
        yield "hello from the pod"
        # The container has ended; the launcher records the end a little later.
        await store.request_cancel(run_id, by="alice")

    monkeypatch.setattr(logs, "pod_log", pod_log)
    async with asyncio.timeout(10):
        items = [item async for item in operations.run_output(rt, run_id, follow=True)]
    items = [i for i in items if not isinstance(i, operations.Notice)]
    assert items[0] == OutputText("hello from the pod\n")
    assert isinstance(items[-1], RunEnded)
    assert items[-1].run.status is RunStatus.CANCELLED
    assert len(items) == 2


async def test_a_followed_pod_run_goes_on_to_its_retry(
    rt: Runtime, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.service.operations import Retrying, logs

    first, second = await queued_pod_run(store), await queued_pod_run(store)

    async def pod_log(_job: str, run_id: str, *_: Any, **__: Any) -> Any:
        yield f"pod of {run_id}"
        await store.request_cancel(run_id, by="alice")

    async def next_attempt(_rt: Runtime, run: Any) -> Any:
        return await store.get_run(second) if run.id == first else None

    monkeypatch.setattr(logs, "pod_log", pod_log)
    monkeypatch.setattr(logs, "next_attempt", next_attempt)
    async with asyncio.timeout(10):
        items = [item async for item in operations.run_output(rt, first, follow=True)]
    items = [i for i in items if not isinstance(i, operations.Notice)]
    assert [type(i) for i in items] == [OutputText, Retrying, OutputText, RunEnded]
    assert items[0] == OutputText(f"pod of {first}\n")
    assert items[2] == OutputText(f"pod of {second}\n")
    assert isinstance(items[-1], RunEnded)
    assert items[-1].run.id == second
