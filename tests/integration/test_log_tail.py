"""A run's last lines (`operations.run_output_tail`), read from the end of its log on real stores
(SQLite and PostgreSQL): whole lines within the bounds, the offsets of what is shown, a 100 MB
log read in a bounded time, the saved and pod tails, and a follow that starts at a tail's end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from runlane.catalog import Catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import InvalidArgument, NotFound, UnknownRun
from runlane.ports import Store
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import (
    OutputSkipped,
    OutputText,
    Requester,
    RunEnded,
)
from runlane.service.runtime import Runtime

from .conftest import run_to_end

ALICE = Requester("alice", Trigger.CLI)


async def run_with_log(rt: Runtime, data: bytes, *, job: str = "hello") -> tuple[str, Path]:
    """A queued run whose log file (where `find_log` looks first) holds `data`."""
    queued = await operations.run_job(rt, job, requester=ALICE)
    path = Path(rt.settings.log_dir) / f"{queued.run.id}.{queued.run.attempt}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return queued.run.id, path


async def test_the_last_lines_and_where_they_are(rt: Runtime) -> None:
    data = b"".join(f"line {i}\n".encode() for i in range(1, 11))
    run_id, _ = await run_with_log(rt, data)
    tail = await operations.run_output_tail(rt, run_id[:8], lines=3, max_bytes=10_000)
    assert tail.text == "line 8\nline 9\nline 10\n"
    assert tail.end_offset == len(data)
    assert tail.start_offset == tail.cut_bytes == len(data) - len(tail.text)
    assert data[tail.start_offset : tail.end_offset].decode() == tail.text
    assert tail.status is RunStatus.QUEUED
    assert tail.source == "file"
    assert not tail.line_open
    whole = await operations.run_output_tail(rt, run_id, lines=50, max_bytes=10_000)
    assert (whole.text, whole.cut_bytes) == (data.decode(), 0)


async def test_an_unfinished_last_line_counts_as_one(rt: Runtime) -> None:
    run_id, _ = await run_with_log(rt, b"a\nb\nhalf")
    tail = await operations.run_output_tail(rt, run_id, lines=2, max_bytes=100)
    assert tail.text == "b\nhalf"
    assert tail.line_open
    assert tail.end_offset == 8


async def test_the_byte_bound_cuts_at_a_line_and_a_long_line_at_a_character(rt: Runtime) -> None:
    data = b"first line\n" + b"x" * 30 + b"\nlast\n"
    run_id, _ = await run_with_log(rt, data)
    tail = await operations.run_output_tail(rt, run_id, lines=3, max_bytes=20)
    assert tail.text == "last\n"  # the line the bound cuts is left out whole
    assert tail.cut_bytes == len(data) - 5
    # One line longer than the bound: cut, but at a character's start (é is two bytes).
    long_id, _ = await run_with_log(rt, "é".encode() * 50 + b"\n")
    cut = await operations.run_output_tail(rt, long_id, lines=1, max_bytes=10)
    assert cut.text in ("ééééé\n", "éééé\n")
    assert "\ufffd" not in cut.text
    assert cut.end_offset - cut.start_offset == len(cut.text.encode())


async def test_the_tail_of_a_100_mb_log_is_read_from_its_end(rt: Runtime) -> None:
    block = b"".join(
        b"%08d some output of a long job, padded to look like a log\n" % i for i in range(16384)
    )
    run_id, path = await run_with_log(rt, b"")
    with path.open("wb") as fh:
        for _ in range(100 * 1024 * 1024 // len(block) + 1):
            fh.write(block)
        fh.write(b"the very last line\n")
    size = path.stat().st_size
    assert size > 100 * 1024 * 1024
    started = time.perf_counter()
    tail = await operations.run_output_tail(rt, run_id, lines=200, max_bytes=1024 * 1024)
    took = time.perf_counter() - started
    lines = tail.text.splitlines()
    assert len(lines) == 200
    assert lines[-1] == "the very last line"
    assert tail.end_offset == size
    assert tail.cut_bytes == size - len(tail.text.encode())
    # A seek and a block or two, not 100 MB: far below what reading the file costs.
    assert took < 0.5, f"the tail of a 100 MB log took {took:.3f} s"


async def test_bounds_below_one_are_refused(rt: Runtime) -> None:
    run_id, _ = await run_with_log(rt, b"x\n")
    with pytest.raises(InvalidArgument):
        await operations.run_output_tail(rt, run_id, lines=0, max_bytes=10)
    with pytest.raises(InvalidArgument):
        await operations.run_output_tail(rt, run_id, lines=1, max_bytes=0)
    with pytest.raises(UnknownRun):
        await operations.run_output_tail(rt, "f" * 32, lines=1, max_bytes=10)


async def test_without_a_file_the_saved_tail_or_a_notice(
    rt: Runtime, store: Store, catalog: Catalog, settings: Settings
) -> None:
    from runlane.service.accept import RunRequest

    (run_id,) = await run_to_end(
        store, catalog, settings, [RunRequest(job="fail", trigger=Trigger.CLI)]
    )
    run = await store.get_run(run_id)
    assert run.status is RunStatus.FAILURE
    (await rt.find_log(run)).unlink()
    saved = await operations.run_output_tail(rt, run, lines=5, max_bytes=1000)
    assert saved.source == "saved"
    assert "boom" in saved.text
    queued = await operations.run_job(rt, "hello", requester=ALICE)
    nothing = await operations.run_output_tail(rt, queued.run.id, lines=5, max_bytes=1000)
    assert (nothing.text, nothing.source) == ("", "none")
    assert nothing.notice is not None
    assert nothing.notice.code == "no_output_yet"


async def test_a_pod_runs_tail_keeps_only_its_last_bytes(
    rt: Runtime, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.service.operations import logs

    from .test_operations import queued_pod_run

    run_id = await queued_pod_run(store)

    async def pod_log(*_: Any, **__: Any) -> Any:
        for i in range(2000):
            yield f"pod line {i}\n"

    monkeypatch.setattr(logs, "pod_log", pod_log)
    tail = await operations.run_output_tail(rt, run_id, lines=2, max_bytes=100)
    assert tail.text == "pod line 1998\npod line 1999\n"
    assert tail.source == "pod"
    total = sum(len(f"pod line {i}\n") for i in range(2000))
    assert tail.end_offset == total
    assert tail.cut_bytes == total - len(tail.text)

    async def no_pod(*_: Any, **__: Any) -> Any:
        from runlane.errors import NotFound

        raise NotFound("no pod of this run to read")
        yield ""  # pragma: no cover - makes this an async generator

    monkeypatch.setattr(logs, "pod_log", no_pod)
    missing = await operations.run_output_tail(rt, run_id, lines=2, max_bytes=100)
    assert missing.text == ""
    assert missing.notice is not None
    assert missing.notice.code == "not_found"
    with pytest.raises(NotFound):  # the API's ?tail=N answers 404, as for the whole log
        await operations.run_output_tail(rt, run_id, lines=2, max_bytes=100, strict=True)


async def test_a_follow_from_a_tails_end_reads_only_what_follows(rt: Runtime, store: Store) -> None:
    run_id, path = await run_with_log(rt, b"old line\n" * 1000)
    tail = await operations.run_output_tail(rt, run_id, lines=1, max_bytes=100)
    with path.open("ab") as fh:
        fh.write(b"new line\n")
    await operations.cancel(rt, run_id, requester=ALICE)
    async with asyncio.timeout(10):
        items = [
            i
            async for i in operations.run_output(rt, run_id, follow=True, start=tail.end_offset)
            if not isinstance(i, operations.Notice)
        ]
    assert items[0] == OutputSkipped(tail.end_offset)
    assert "".join(i.text for i in items if isinstance(i, OutputText)) == "new line\n"
    assert isinstance(items[-1], RunEnded)
    # Past the end of the run's own file (a reader's offset from a retry): read from the start.
    again = [
        i
        async for i in operations.run_output(rt, run_id, follow=True, start=10**9)
        if not isinstance(i, operations.Notice)
    ]
    assert not any(isinstance(i, OutputSkipped) for i in again)
    assert isinstance(again[-1], RunEnded)


async def test_a_follow_without_the_log_files_shows_every_attempts_saved_tail(
    rt: Runtime, start_launcher: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followed from where the log files cannot be read (another host's launcher, gone since;
    the files removed), each attempt's output is its saved tail, the first's as the last's:
    `logs --follow` and `run --wait` print what `logs ID` of each attempt prints."""
    monkeypatch.setenv("RUNLANE_TEST_DIR", str(tmp_path))
    (tmp_path / "open").touch()
    launcher = start_launcher()
    queued = await operations.run_job(
        rt, "gated", requester=ALICE, params={"gate": "open", "code": 1}
    )
    async with asyncio.timeout(20):
        live = [i async for i in operations.follow_run(rt, queued.run.id)]
    await launcher.stop()
    assert [type(i) for i in live] == [OutputText, operations.Retrying, OutputText, RunEnded]
    last = live[-1]
    assert isinstance(last, RunEnded)
    for run in (await rt.store.get_run(queued.run.id), last.run):
        (await rt.find_log(run)).unlink()
    async with asyncio.timeout(10):
        items = [
            i
            async for i in operations.run_output(rt, queued.run.id, follow=True)
            if not isinstance(i, operations.Notice)
        ]
    assert [type(i) for i in items] == [OutputText, operations.Retrying, OutputText, RunEnded]
    assert [i.text for i in items if isinstance(i, OutputText)] == ["passed open\n"] * 2
