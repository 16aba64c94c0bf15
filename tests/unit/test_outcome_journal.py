"""The outcome journal's writes on disk: durable once `keep` returns (the file, then its
directory, fsynced), and nothing left behind when the disk refuses the write."""

from __future__ import annotations

import errno
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from runlane.core.runs import Outcome, Run, RunStatus
from runlane.service.launcher.journal import OutcomeJournal

RUN = Run(
    id="r1",
    job="hello",
    status=RunStatus.RUNNING,
    trigger="cli",
    dedupe_key="k",
    attempt=1,
    executor="inline",
    overlap="allow",
    params={},
    params_raw="{}",
    queued_at=datetime(2031, 1, 2, tzinfo=UTC),
)
OUTCOME = Outcome(RunStatus.SUCCESS, "exit", exit_code=0, log_tail="done\n")


def test_a_kept_outcome_is_fsynced_then_renamed_then_its_directory_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = OutcomeJournal(tmp_path, "L1")
    path = journal.path(RUN.id, RUN.attempt)
    synced: list[tuple[str, bool]] = []  # (what the fd is, whether the journal file exists yet)
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            kind = "log dir" if info.st_ino == tmp_path.stat().st_ino else "other dir"
        else:
            kind = "file"
        synced.append((kind, path.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    journal.keep(RUN, OUTCOME, None)
    # The directory is fsynced after the rename: before it, a power cut could lose the file.
    assert synced == [("file", False), ("log dir", True)]
    assert RUN.id in journal
    read = journal.read(RUN)
    assert read is not None
    assert (read[0].status, read[0].exit_code, read[0].log_tail) == (RunStatus.SUCCESS, 0, "done\n")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failed_write_is_reported_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    journal = OutcomeJournal(tmp_path, "L1")

    def failing_fsync(fd: int) -> None:  # the disk refuses the data the file was given
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with capture_logs() as logged:
        journal.keep(RUN, OUTCOME, None)
    assert [(e["event"], e["run_id"]) for e in logged] == [("run.journal_failed", RUN.id)]
    assert os.strerror(code) in logged[0]["error"]
    assert RUN.id not in journal  # not kept: nothing to remove once recorded
    assert list(tmp_path.iterdir()) == []  # no `r1.1.outcome.tmp` left behind


def test_a_directory_that_cannot_be_synced_leaves_the_journal_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is written, fsynced and renamed; only the directory's fsync fails. The journal
    # is there for a takeover to find: a warning says its durability is in doubt, not that
    # it failed.
    journal = OutcomeJournal(tmp_path, "L1")
    real_fsync = os.fsync

    def directory_fails(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", directory_fails)
    with capture_logs() as logged:
        journal.keep(RUN, OUTCOME, None)
    assert [(e["event"], e["log_level"]) for e in logged] == [("run.journal_not_synced", "warning")]
    assert RUN.id in journal
    assert journal.read(RUN) is not None
