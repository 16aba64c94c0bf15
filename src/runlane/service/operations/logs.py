"""A run's output: its log file (local, or the pod's from the cluster), followed to the run's end
and through its retries, as a stream of typed items a face prints (`runlane logs`, `logs
--follow`, `run --wait`): the output, the notices (kept for repair, waiting for a pod), an
incomplete log file's marker, each retry, and the run's end."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

from runlane.core.runs import Run, RunStatus
from runlane.errors import NotFound, RunlaneError
from runlane.service.operations.lookup import resolve_run
from runlane.service.operations.notices import Notice, kept_for_repair_notice, no_launcher_notices
from runlane.service.operations.runs import next_attempt
from runlane.service.runtime import Runtime
from runlane.service.wiring import pod_log

# How often a followed run is read again while it has not ended.
FOLLOW_POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class OutputText:
    """Text of the run's output, as the job wrote it (a terminal face escapes its control
    characters)."""

    text: str


@dataclass(frozen=True, slots=True)
class OutputBytes:
    """The run's whole log file, byte for byte (`runlane logs` without `--follow`)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class LogIncomplete:
    """The log file stops short (a full disk, its directory gone), as the run's note says:
    `marker` says where and why; `line_open`: the output before it stops mid-line; `tail`: the
    output saved with the run, to show whole after the marker."""

    marker: str
    line_open: bool
    tail: str | None


@dataclass(frozen=True, slots=True)
class Retrying:
    """An attempt of the followed run ended and its retry, `next_run`, is followed now."""

    ended: Run
    next_run: Run


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The followed run (its last attempt) has ended: the last item of a follow."""

    run: Run


OutputItem = OutputText | OutputBytes | LogIncomplete | Retrying | RunEnded | Notice

# The note the inline executor records on a run whose log file it could not write whole (a full
# disk, the log directory gone): `Child._outcome` in adapters/local/process.py. Runs carry no
# structured field for it (`error_code` classifies failures, and the run may have succeeded), so
# the note is the record; the file it names must be the run's own (`<run id>.<attempt>.log`).
_INCOMPLETE_LOG = re.compile(
    r"the log file (?P<path>[^\n]+?) is incomplete: writing it failed \((?P<error>[^\n]*?)\); "
    r"the tail here is complete"
)


def _utf8_decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")("replace")


def incomplete_log_error(note: str | None, log_name: str) -> str | None:
    """Why the log file named `log_name` was left incomplete (`No space left on device`), as
    the run's note says; None when the note says no such thing of that file."""
    for found in _INCOMPLETE_LOG.finditer(note or ""):
        if PurePath(found["path"]).name == log_name:
            return found["error"]
    return None


def incomplete_log_marker(size: int | None, error: str, *, tail: bool) -> str:
    """The line that says where an incomplete log file stops (`size` bytes; None when there is
    no file to read) and that the run's saved tail follows."""
    where = f"the log file stopped at {size} bytes" if size is not None else "there is no log file"
    then = "its last lines as saved with the run follow" if tail else "no lines were saved"
    return f"[runlane: {where}: writing it failed ({error}); {then}]"


def incomplete_log(
    run: Run, log_path: Path, *, size: int | None, line_open: bool
) -> LogIncomplete | None:
    """After the log file's text (`size` bytes; None when there was no file to read): the
    marker and the saved tail when the run's note says the file is incomplete, else None."""
    error = incomplete_log_error(run.note, log_path.name)
    if error is None:
        return None
    marker = incomplete_log_marker(size, error, tail=bool(run.log_tail))
    return LogIncomplete(marker, line_open, run.log_tail or None)


async def follow_run(
    rt: Runtime, run_id: str, *, read_output: bool = True
) -> AsyncIterator[OutputItem]:
    """Follow a run (and its retries) to the end: its output as it is written (`read_output`),
    a `kept_for_repair` notice once per run a launcher keeps for repair, a `Retrying` between
    attempts, and `RunEnded` last."""
    from runlane.service.doctor import REPAIR_CODES

    run = await rt.store.get_run(run_id)
    printed: dict[str, int] = {}  # bytes of each log file read
    line_open: dict[str, bool] = {}  # whether what was read of it stops mid-line
    told: set[str] = set()  # runs whose repair was said: once, not on every poll
    found: dict[str, Path] = {}  # each run's log file once found: not looked for again
    decoders: dict[str, codecs.IncrementalDecoder] = {}  # each log file's UTF-8 decoder

    async def log_file(of: Run) -> Path:
        if of.id not in found:
            path = await rt.find_log(of)
            if not path.is_file():
                return path
            found[of.id] = path
        return found[of.id]

    while True:
        if run.status is RunStatus.QUEUED and run.error_code in REPAIR_CODES and run.id not in told:
            told.add(run.id)
            yield await kept_for_repair_notice(rt, run)
        path = await log_file(run) if read_output else None
        if path is not None and path.is_file():  # not whatever took its place (a directory)
            with path.open("rb") as fh:
                fh.seek(printed.get(str(path), 0))
                chunk = fh.read()
            # Decoded incrementally: a character whose bytes straddle two reads of a growing
            # file comes out whole with the second read, not as two replacement characters.
            decoder = decoders.setdefault(str(path), _utf8_decoder())
            if chunk:
                printed[str(path)] = printed.get(str(path), 0) + len(chunk)
                line_open[str(path)] = not chunk.endswith(b"\n")
            text = decoder.decode(chunk, final=run.status.is_final)
            if text:
                yield OutputText(text)
        if run.status.is_final:
            told_tail = False
            if path is not None:  # the file is whole once the run has ended: read to its end
                marker = incomplete_log(
                    run,
                    path,
                    size=printed.get(str(path), 0) if path.is_file() else None,
                    line_open=line_open.get(str(path), False),
                )
                if marker is not None:
                    told_tail = True
                    yield marker
            nxt = await next_attempt(rt, run)
            if nxt is None:
                unprinted = path is not None and str(path) not in printed
                if unprinted and not told_tail and run.log_tail:
                    yield OutputText(run.log_tail)
                yield RunEnded(run)
                return
            if read_output:
                yield Retrying(run, nxt)
            run = nxt
            continue
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
        run = await rt.store.get_run(run.id)


async def run_output(
    rt: Runtime, run_id: str, *, follow: bool = False
) -> AsyncIterator[OutputItem]:
    """A run's output by id or unique prefix (`unknown_run`, `ambiguous_id`): the log file whole,
    or followed to the end (`follow`; `no_launcher` first for a queued run, else it waits in
    silence). A pod run's log comes from the cluster (`not_found` when there is no pod to read
    and no saved tail). Without output, an `info` notice says why."""
    run = await resolve_run(rt, run_id)
    if follow and run.status is RunStatus.QUEUED:
        for notice in await no_launcher_notices(rt):
            yield notice
    if follow and run.executor == "pod":
        async for item in _follow_pod_run(rt, run):
            yield item
        return
    if run.executor == "pod" and not (run.status.is_final and run.log_tail):
        # The pod's log, from the cluster; the saved tail once the run has ended.
        try:
            async for pod_item in _pod_output(rt, run, follow=follow):
                yield pod_item
            return
        except NotFound:
            if not run.log_tail:
                raise
    if follow:
        async for item in follow_run(rt, run.id):
            yield item
        return
    path = await rt.find_log(run)
    if path.is_file():  # not whatever took its place (a directory: no file was written)
        data = path.read_bytes()
        yield OutputBytes(data)
        line_open = bool(data) and not data.endswith(b"\n")
        marker = incomplete_log(run, path, size=len(data), line_open=line_open)
        if marker is not None:
            yield marker
    elif (marker := incomplete_log(run, path, size=None, line_open=False)) is not None:
        yield marker  # no file to read, which the note explains: the marker, then the saved tail
    elif run.log_tail:
        yield OutputText(run.log_tail)
    elif not run.status.is_final:
        yield Notice(
            "no_output_yet", f"run {run.id} has no output yet ({run.status.value})", "info"
        )
    else:
        # Nothing was written (it never started, or printed nothing): say how it ended.
        why = f": {run.note}" if run.note else ""
        reason = f" ({run.end_reason})" if run.end_reason else ""
        yield Notice(
            "no_output",
            f"run {run.id} has no output; it ended {run.status.value}{reason}{why}",
            "info",
        )


async def _follow_pod_run(rt: Runtime, run: Run) -> AsyncIterator[OutputItem]:
    """A pod run followed as `follow_run` follows a local one: the pod's log (the saved tail
    once the run has ended), then, once the run is final, `Retrying` and its retry, or
    `RunEnded` last. Without the end a client cannot tell the run ended from a dropped
    connection (an EventSource reconnects and reads the whole pod log again, forever)."""
    while run.executor == "pod":
        if run.status.is_final and run.log_tail:
            yield OutputText(run.log_tail)
        else:
            try:
                async for pod_item in _pod_output(rt, run, follow=True):
                    yield pod_item
            except NotFound:
                if not run.log_tail:
                    raise
                yield OutputText(run.log_tail)
        # The container has ended; the run is final once its launcher has recorded how.
        run = await rt.store.get_run(run.id)
        while not run.status.is_final:
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            run = await rt.store.get_run(run.id)
        nxt = await next_attempt(rt, run)
        if nxt is None:
            yield RunEnded(run)
            return
        yield Retrying(run, nxt)
        run = nxt
    async for item in follow_run(rt, run.id):  # a retry that runs inline (a changed catalog)
        yield item


async def _pod_output(rt: Runtime, run: Run, *, follow: bool) -> AsyncIterator[OutputText | Notice]:
    """`pod_log_lines` as items, with what it waits for (`waiting_for_pod`) as it waits: the
    log is read by a task, so a notice is passed on while the read still waits."""
    items: asyncio.Queue[OutputText | Notice | Exception | None] = asyncio.Queue()

    def on_wait(message: str) -> None:
        items.put_nowait(Notice("waiting_for_pod", message, "info"))

    async def read() -> None:
        try:
            async for chunk in pod_log_lines(rt, run, follow=follow, on_wait=on_wait):
                items.put_nowait(OutputText(chunk + "\n" if follow else chunk))
        except Exception as exc:  # noqa: BLE001 - raised again below, where the face reads
            items.put_nowait(exc)
        else:
            items.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await items.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def pod_log_lines(
    rt: Runtime, run: Run, *, follow: bool, on_wait: Callable[[str], None] | None = None
) -> AsyncIterator[str]:
    """A pod run's log from the cluster (`runlane logs`): whole, or followed line by line until
    its container ends. `NotFound` when there is no pod to read (without `follow`).

    `follow` waits for the pod to exist and its container to start (bounded backoff; `on_wait`
    is told once what it waits for) as long as the run is not final. A run that ends before its
    pod ran yields its saved log tail, and `on_wait` gets how it ended."""
    namespace = None
    with contextlib.suppress(RunlaneError):
        spec = rt.require_catalog().resolve(run.job).profile_spec
        namespace = spec.namespace if spec is not None else None
    last = run

    async def active() -> bool:
        nonlocal last
        last = await rt.store.get_run(run.id)
        return not last.status.is_final

    streamed = False
    async for chunk in pod_log(
        run.job, run.id, run.attempt, namespace, follow=follow, active=active, on_wait=on_wait
    ):
        streamed = True
        yield chunk
    if follow and not streamed and last.status.is_final:
        for line in (last.log_tail or "").splitlines():
            yield line
        if on_wait is not None:
            reason = f" ({last.error_code})" if last.error_code else ""
            note = f": {last.note}" if last.note else ""
            on_wait(
                f"run {last.id} ended {last.status.value}{reason} while waiting for its pod{note}"
            )
