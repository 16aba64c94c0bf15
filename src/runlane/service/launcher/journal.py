"""The outcome journal: inline runs' outcomes kept on disk, next to their logs, while the
database is down, so that the launcher that takes a run over records how it really ended."""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from runlane.core.runs import Outcome, Run, RunStatus, can_transition

log = structlog.get_logger("runlane.launcher")


def seconds_since_wall(iso: object) -> float:
    """Seconds since an ISO-8601 time with its zone, by this machine's clock; 0 when unknown."""
    try:
        then = datetime.fromisoformat(str(iso))
        if then.tzinfo is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - then).total_seconds())
    except (ValueError, OverflowError):
        return 0.0


class OutcomeJournal:
    """One `<run id>.<attempt>.outcome.json` per outcome kept, in the inline log directory,
    until the outcome is recorded (`done`)."""

    __slots__ = ("_kept", "_log_dir", "_owner")

    def __init__(self, log_dir: str | Path, owner: str) -> None:
        self._log_dir = Path(log_dir)
        self._owner = owner
        self._kept: dict[str, Path] = {}  # run id → its journal file, until recorded

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._kept

    def path(self, run_id: str, attempt: int) -> Path:
        return self._log_dir / f"{run_id}.{attempt}.outcome.json"

    def done(self, run_id: str) -> None:
        """The run's outcome is recorded: a journal kept meanwhile has done its job."""
        path = self._kept.pop(run_id, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def keep(self, run: Run, outcome: Outcome, ended_monotonic: float | None) -> None:
        """Write the outcome of `run` (ended at `time.monotonic()` `ended_monotonic`) durably."""
        path = self.path(run.id, run.attempt)
        ago = 0.0 if ended_monotonic is None else time.monotonic() - ended_monotonic
        record = {
            "run_id": run.id,
            "attempt": run.attempt,
            "launcher": self._owner,
            **outcome.columns(),
            "ended_at": (datetime.now(UTC) - timedelta(seconds=max(0.0, ago))).isoformat(),
        }
        tmp = path.with_suffix(".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                json.dump(record, fh)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(path)
        except OSError as exc:
            log.error("run.journal_failed", run_id=run.id, error=str(exc))
            # A disk that is full (or failing) would otherwise keep the partial file for good.
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return
        self._kept[run.id] = path
        try:
            # The rename is durable only once the directory is: without this, a power cut soon
            # after could lose the journal, and the run be recorded `launcher_lost` (and run
            # again). The file itself is in place; only its durability is in doubt.
            _fsync_directory(self._log_dir)
        except OSError as exc:
            # The journal is in place (a takeover here finds it); only a power cut could lose it.
            log.warning("run.journal_not_synced", run_id=run.id, error=str(exc))

    def read(self, run: Run) -> tuple[Outcome, float] | None:
        """How an inline run ended, from the journal of the launcher that ran it, if any, with
        its end as `time.monotonic()` time (so the run keeps its real end)."""
        path = self.path(run.id, run.attempt)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            status = RunStatus(record["status"])
            if not status.is_final or not can_transition(RunStatus.RUNNING, status):
                # Never written by a launcher (hand-edited, corrupt): recording it would fail
                # on every takeover, and the run be taken over again every lease TTL.
                raise ValueError(f"a running run cannot end as {status.value!r}")
            outcome = Outcome(
                status,
                str(record["end_reason"]),
                exit_code=record.get("exit_code"),
                error_code=record.get("error_code"),
                log_tail=record.get("log_tail"),
                note=f"recorded from the outcome journal of launcher {record.get('launcher')}, "
                f"which ran it (it ended at {record.get('ended_at')}) and could not save the "
                "outcome before its lease expired"
                + (f"; {record['note']}" if record.get("note") else ""),
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.error("run.journal_unreadable", run_id=run.id, path=str(path), error=str(exc))
            return None
        except (ValueError, KeyError, TypeError) as exc:
            # Set aside (kept for a person to look at), so that it is not read again.
            aside = path.with_name(f"{path.name}.corrupt")
            log.error(
                "run.journal_unreadable",
                run_id=run.id,
                path=str(path),
                error=str(exc),
                set_aside=str(aside),
            )
            with contextlib.suppress(OSError):
                path.replace(aside)
            return None
        self._kept[run.id] = path  # removed once this outcome is recorded
        return outcome, time.monotonic() - seconds_since_wall(record.get("ended_at"))


def _fsync_directory(directory: Path) -> None:
    """Make the entries of `directory` (a rename into it) durable. (Where a directory cannot be
    opened, Windows, a rename is made durable by the file system itself.)"""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
