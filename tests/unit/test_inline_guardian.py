"""The guardian's command loop, in-process: what it ends up holding when its launcher is gone."""

from __future__ import annotations

import os
import subprocess

import pytest

from runlane.adapters.local import guardian
from runlane.adapters.local.guardian import Guardian, GuardianError


def serve_on(payload: bytes) -> set[int]:
    """Run `serve` on a pipe holding `payload`, then EOF; the launcher is our (live) parent."""
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, payload)
        os.close(wfd)
        return guardian.serve(os.getppid(), rfd)
    finally:
        os.close(rfd)


def test_registers_and_unregisters_groups() -> None:
    assert serve_on(b"+100\n+200\n-100\n+300\n+300\n-999\n") == {200, 300}


def test_ignores_junk_and_never_holds_our_own_or_init_group() -> None:
    assert serve_on(b"+0\n+1\n-\n+\nhello\n+12x\n*5\n+-7\n+42\n") == {42}


def test_a_line_cut_by_eof_is_not_applied() -> None:
    assert serve_on(b"+42\n+4") == {42}


def test_lines_split_across_reads_are_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guardian, "_READ_CHUNK", 3)
    assert serve_on(b"+1234\n+56789\n-1234\n") == {56789}


def test_a_launcher_that_is_not_our_parent_counts_as_gone() -> None:
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, b"+77\n")
        # The write end stays open: only the parent check can end the loop.
        assert guardian.serve(os.getpid(), rfd) == {77}
    finally:
        os.close(rfd)
        os.close(wfd)


def test_the_guardian_process_imports_nothing_heavy() -> None:
    argv = guardian.guardian_argv()
    assert argv is not None
    assert argv[1:3] == ["-I", "-S"]
    # stdin at EOF: it starts, finds nothing registered, and exits.
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:], str(os.getpid())],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    heavy_modules = ("runlane", "subprocess", "asyncio", "pathlib", "contextlib", "typing", "enum")
    for heavy in (*heavy_modules, "signal", "site"):
        assert heavy not in imported, heavy
    assert "select" in imported


def test_a_guardian_that_cannot_run_is_given_up_on() -> None:
    g = Guardian(["false"])  # exits at once: writes soon find a broken pipe
    errors: list[str] = []
    try:
        for pgid in range(1_000_000, 1_100_000):
            try:
                g.register(pgid)  # each broken pipe starts another, until the limit
            except GuardianError as exc:
                errors.append(str(exc))
                if "exited" in str(exc):
                    break
        assert errors
        assert errors[-1] == "the guardian process exited 5 times within 10s"
        assert g.starts == 5
        assert g.pid is None
    finally:
        g.close()
