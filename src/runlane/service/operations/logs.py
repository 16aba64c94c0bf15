"""A run's output: its log file (local, or the pod's from the cluster), followed to the run's end
and through its retries, as a stream of typed items a face prints (`runlane logs`, `logs
--follow`, `run --wait`): the output, the notices (kept for repair, waiting for a pod), an
incomplete log file's marker, each retry, and the run's end. Or only its last lines, read from
the end of the file (`run_output_tail`: the run page, MCP's `get_run_logs`, `logs?tail=`)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import io
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import BinaryIO

from runlane.core.runs import Run, RunStatus
from runlane.errors import InvalidArgument, NotFound, RunlaneError
from runlane.service.operations.lookup import resolve_run
from runlane.service.operations.notices import (
    Notice,
    abandoned_run_notice,
    kept_for_repair_notice,
    no_launcher_notices,
)
from runlane.service.operations.runs import next_attempt
from runlane.service.runtime import Runtime
from runlane.service.wiring import pod_log

# How often a followed run is read again while it has not ended.
FOLLOW_POLL_SECONDS = 0.2
# How often a followed running run is checked for a launcher that stopped with nobody to take
# the run over (`abandoned_run_notice`): a few reads, not one a poll.
ABANDONED_CHECK_SECONDS = 5.0
# How much of a log file one read takes while a tail looks backwards for its first line.
TAIL_BLOCK_BYTES = 64 * 1024
# How much of a log file one read takes when it is read whole (`run_output`): it comes in pieces
# of this size, never all at once (a log may be as large as log_max_bytes, up to 1 TiB).
READ_BLOCK_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class OutputText:
    """Text of the run's output, as the job wrote it (a terminal face escapes its control
    characters). `raw`: the bytes of the log file it was decoded from, when it was read from
    one; a byte offset into the log counts these (a byte that is not UTF-8 is one byte there,
    and three as the U+FFFD of `text`), and may hold the start of a character that `text`
    leaves to the next item."""

    text: str
    raw: bytes | None = None


@dataclass(frozen=True, slots=True)
class OutputBytes:
    """A piece of the run's log file, byte for byte (`runlane logs` without `--follow`): the
    file comes in pieces one after another, each ending at a character's end (a piece of
    UTF-8 text decodes on its own)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class OutputSkipped:
    """The first `size` bytes of the followed output are not read: the follow was asked to
    start after them (`start`), and the first attempt's log file holds them."""

    size: int


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


OutputItem = OutputText | OutputBytes | OutputSkipped | LogIncomplete | Retrying | RunEnded | Notice

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
    rt: Runtime, run_id: str, *, read_output: bool = True, start: int = 0
) -> AsyncIterator[OutputItem]:
    """Follow a run (and its retries) to the end: its output as it is written (`read_output`),
    a `kept_for_repair` notice once per run a launcher keeps for repair, a `Retrying` between
    attempts, and `RunEnded` last.

    `start`: a byte offset the reader already has (a tail's `end_offset`). When the run's own
    log file holds that many bytes, it is read from there (`OutputSkipped` first: a 100 MB log
    is not read again); otherwise from its start, and the reader skips what it has."""
    from runlane.service.doctor import REPAIR_CODES

    run = await rt.store.get_run(run_id)
    first_id = run.id
    printed: dict[str, int] = {}  # bytes of each log file read
    line_open: dict[str, bool] = {}  # whether what was read of it stops mid-line
    told: set[str] = set()  # runs whose repair was said: once, not on every poll
    found: dict[str, Path] = {}  # each run's log file once found: not looked for again
    decoders: dict[str, codecs.IncrementalDecoder] = {}  # each log file's UTF-8 decoder
    abandoned_check_at = 0.0  # (time.monotonic) when a running run is next checked
    abandoned: set[str] = set()  # runs said to have lost their launcher: once each

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
            fresh = start > 0 and run.id == first_id and str(path) not in printed
            if fresh and start <= path.stat().st_size:
                printed[str(path)] = start
                yield OutputSkipped(start)
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
            if text or chunk:
                yield OutputText(text, chunk)
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
            # No file was read (another host's, removed): the attempt's saved tail, for every
            # attempt, before its retry as after the last one.
            unprinted = path is not None and str(path) not in printed
            if unprinted and not told_tail and run.log_tail:
                yield OutputText(run.log_tail)
            nxt = await next_attempt(rt, run)
            if nxt is None:
                yield RunEnded(run)
                return
            if read_output:
                yield Retrying(run, nxt)
            run = nxt
            continue
        if run.status is RunStatus.RUNNING and time.monotonic() >= abandoned_check_at:
            abandoned_check_at = time.monotonic() + ABANDONED_CHECK_SECONDS
            if run.id not in abandoned and (notice := await abandoned_run_notice(rt, run)):
                abandoned.add(run.id)  # said once; the follow goes on (a launcher may start)
                yield notice
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
        run = await rt.store.get_run(run.id)


async def run_output(
    rt: Runtime, run_id: str, *, follow: bool = False, start: int = 0
) -> AsyncIterator[OutputItem]:
    """A run's output by id or unique prefix (`unknown_run`, `ambiguous_id`): the log file whole
    (in pieces: `OutputBytes`), or followed to the end (`follow`; `no_launcher` first for a queued run, else it waits in
    silence; `start` as `follow_run` takes it). A pod run's log comes from the cluster
    (`not_found` when there is no pod to read and no saved tail). Without output, an `info`
    notice says why."""
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
        async for item in follow_run(rt, run.id, start=start):
            yield item
        return
    path = await rt.find_log(run)
    if path.is_file():  # not whatever took its place (a directory: no file was written)
        size = 0
        line_open = False
        with path.open("rb") as fh:
            for piece in _pieces(fh):
                size += len(piece)
                line_open = not piece.endswith(b"\n")
                yield OutputBytes(piece)
        marker = incomplete_log(run, path, size=size, line_open=line_open)
        if marker is not None:
            yield marker
    else:
        yield _without_log_file(run, path)


def _pieces(fh: BinaryIO) -> Iterator[bytes]:
    """The file `fh` from where it is to its end, in pieces of about READ_BLOCK_BYTES (never
    empty), each cut after a character's last byte: a character whose bytes straddle two
    reads goes with the second piece."""
    held = b""
    while block := fh.read(READ_BLOCK_BYTES):
        data = held + block
        cut = _character_end(data)
        held = data[cut:]
        if cut:
            yield data[:cut]
    if held:
        yield held  # the file ends mid-character (or is not UTF-8): its bytes as they are


def _character_end(data: bytes) -> int:
    """Where the last whole UTF-8 character of `data` ends: before an unfinished multi-byte
    sequence at its end (at most 3 bytes), else its length. Bytes that are not UTF-8 at all
    end where they are."""
    for back in range(1, min(len(data), 4) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)  # ASCII: nothing unfinished after it
        if byte >= 0xC0:  # a sequence's first byte: 2, 3 or 4 bytes long
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if back < length else len(data)
    return len(data)  # continuation bytes only: not a sequence this could finish


def _without_log_file(run: Run, path: Path) -> LogIncomplete | OutputText | Notice:
    """What stands for a local run's output when `path`, its log file, is not there: the marker
    of an incomplete log (its note explains; the saved tail follows it), the saved tail, or a
    notice that says there is no output (yet)."""
    if (marker := incomplete_log(run, path, size=None, line_open=False)) is not None:
        return marker
    if run.log_tail:
        return OutputText(run.log_tail)
    if not run.status.is_final:
        return Notice(
            "no_output_yet", f"run {run.id} has no output yet ({run.status.value})", "info"
        )
    # Nothing was written (it never started, or printed nothing): say how it ended.
    why = f": {run.note}" if run.note else ""
    reason = f" ({run.end_reason})" if run.end_reason else ""
    return Notice(
        "no_output",
        f"run {run.id} has no output; it ended {run.status.value}{reason}{why}",
        "info",
    )


@dataclass(frozen=True, slots=True)
class LogTail:
    """The end of a run's output: `text`, the last lines (whole lines, unless one line alone is
    longer than the byte bound), which are the bytes `start_offset` to `end_offset` of the log
    (`cut_bytes` = `start_offset` bytes before them are left out); `line_open` when the text
    stops mid-line (a running job's unfinished line). `status` is the run's when it was read.

    `source` says where the text comes from: `file` (the local log file), `pod` (the pod's log
    from the cluster), `saved` (the tail saved with the run), or `none`. `incomplete`: the log
    file stops short (its marker, and the complete tail saved with the run); `notice`: why
    there is no output (yet), or why a pod's log cannot be read."""

    run_id: str
    status: RunStatus
    text: str
    start_offset: int
    end_offset: int
    cut_bytes: int
    line_open: bool
    source: str
    incomplete: LogIncomplete | None = None
    notice: Notice | None = None


def _tail_bytes(fh: BinaryIO, *, lines: int, max_bytes: int) -> tuple[bytes, int, int]:
    """The last `lines` lines of the seekable file `fh`, but at most `max_bytes` of them, read
    backwards from its end in blocks (never the whole file): (bytes, start, end offsets).

    When the bound cuts a line, the text starts at the next line; a single line longer than the
    bound is cut at a character's start. A last line without its newline counts as one."""
    end = fh.seek(0, io.SEEK_END)
    floor = max(0, end - max_bytes)
    pos = end
    data = b""
    while pos > floor:
        step = min(TAIL_BLOCK_BYTES, pos - floor)
        pos -= step
        fh.seek(pos)
        data = fh.read(step) + data
        body = len(data) - 1 if data.endswith(b"\n") else len(data)
        if data.count(b"\n", 0, body) >= lines:
            break
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(lines):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    if cut >= 0:
        start = cut + 1  # just after the newline before the first line wanted
    elif pos > 0:
        # The bound was reached before the start of the first line wanted: begin at the first
        # whole line, or (one line longer than the bound) at the first whole character.
        first = data.find(b"\n")
        if 0 <= first < len(data) - 1:
            start = first + 1
        else:
            start = 0
            while start < min(len(data), 3) and 0x80 <= data[start] < 0xC0:
                start += 1  # a UTF-8 continuation byte: not a character's start
    else:
        start = 0
    return data[start:], pos + start, pos + len(data)


def _tail_of(
    run: Run, data: bytes, *, lines: int, max_bytes: int, source: str, dropped: int = 0
) -> LogTail:
    """`LogTail` of output held in memory (`dropped` bytes before `data` were not kept)."""
    text, start, end = _tail_bytes(io.BytesIO(data), lines=lines, max_bytes=max_bytes)
    return LogTail(
        run_id=run.id,
        status=run.status,
        text=text.decode("utf-8", "replace"),
        start_offset=dropped + start,
        end_offset=dropped + end,
        cut_bytes=dropped + start,
        line_open=bool(text) and not text.endswith(b"\n"),
        source=source,
    )


async def run_output_tail(
    rt: Runtime, run_id_or_run: str | Run, *, lines: int, max_bytes: int, strict: bool = False
) -> LogTail:
    """The last `lines` lines of a run's output (by id or unique prefix, or the `Run` itself),
    at most `max_bytes` of them (`invalid_argument` when either is below 1).

    A local log file is read from its end (a 100 MB log costs a seek and a few blocks). A pod
    run's log comes from the cluster (its saved tail once it has ended), and only its last
    `max_bytes` are kept while it is read. Without output, `notice` says why; a pod log that
    cannot be read too (no pod, no cluster configured), so a page can still show the run, or
    with `strict` that error is raised (`not_found`, as `run_output` raises it)."""
    if lines < 1:
        raise InvalidArgument(f"lines {lines}: expected at least 1")
    if max_bytes < 1:
        raise InvalidArgument(f"max_bytes {max_bytes}: expected at least 1")
    run = run_id_or_run if isinstance(run_id_or_run, Run) else await resolve_run(rt, run_id_or_run)
    if run.executor == "pod" and not (run.status.is_final and run.log_tail):
        return await _pod_tail(rt, run, lines=lines, max_bytes=max_bytes, strict=strict)
    if run.executor == "pod":
        return _tail_of(
            run, (run.log_tail or "").encode(), lines=lines, max_bytes=max_bytes, source="saved"
        )
    path = await rt.find_log(run)
    if path.is_file():
        with path.open("rb") as fh:
            data, start, end = _tail_bytes(fh, lines=lines, max_bytes=max_bytes)
        line_open = bool(data) and not data.endswith(b"\n")
        return LogTail(
            run_id=run.id,
            status=run.status,
            text=data.decode("utf-8", "replace"),
            start_offset=start,
            end_offset=end,
            cut_bytes=start,
            line_open=line_open,
            source="file",
            incomplete=incomplete_log(run, path, size=end, line_open=line_open),
        )
    instead = _without_log_file(run, path)
    empty = LogTail(run.id, run.status, "", 0, 0, 0, line_open=False, source="none")
    if isinstance(instead, LogIncomplete):
        return replace(empty, incomplete=instead)
    if isinstance(instead, Notice):
        return replace(empty, notice=instead)
    return _tail_of(run, instead.text.encode(), lines=lines, max_bytes=max_bytes, source="saved")


async def _pod_tail(rt: Runtime, run: Run, *, lines: int, max_bytes: int, strict: bool) -> LogTail:
    """`run_output_tail` of a pod run whose log is read from the cluster: only the last
    `max_bytes` are kept while it streams in."""
    kept = bytearray()
    dropped = 0
    notice: Notice | None = None
    try:
        async for item in _pod_output(rt, run, follow=False):
            if isinstance(item, Notice):
                notice = item
                continue
            kept += item.text.encode()
            if len(kept) > 2 * max_bytes:
                excess = len(kept) - max_bytes
                del kept[:excess]
                dropped += excess
    except RunlaneError as exc:
        if strict:
            raise
        notice = Notice(exc.code, exc.message, "info")
    tail = _tail_of(
        run, bytes(kept), lines=lines, max_bytes=max_bytes, source="pod", dropped=dropped
    )
    return replace(tail, notice=notice) if notice is not None and not tail.text else tail


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
