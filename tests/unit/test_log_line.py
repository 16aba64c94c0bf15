"""The console log format as written to a pipe or a file (`runlane serve` under systemd or
Kubernetes): the layout people read at a terminal, one record per line, cheap to write."""

from __future__ import annotations

import enum
import logging
import re

import pytest
import structlog

from runlane.cli.logging import configure_logging
from runlane.cli.logline import LineRenderer


@pytest.fixture
def console_logging(monkeypatch: pytest.MonkeyPatch) -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    monkeypatch.setenv("RUNLANE_LOG_FORMAT", "console")
    monkeypatch.setenv("RUNLANE_LOG_LEVEL", "info")
    yield None
    root.handlers, root.level = handlers, level
    structlog.reset_defaults()


def test_a_record_is_the_console_layout_with_sorted_pairs() -> None:
    line = LineRenderer()(
        None,
        "info",
        {
            "timestamp": "2026-12-01T07:20:05.149517Z",
            "level": "info",
            "event": "run.finished",
            "status": "success",
            "attempt": 1,
            "retry": None,
            "job": "noop",
        },
    )
    assert line == (
        "2026-12-01T07:20:05.149517Z [info     ] run.finished                   "
        "attempt=1 job=noop retry=None status=success"
    )


def test_a_str_enum_is_written_as_its_text_and_an_odd_level_is_padded() -> None:
    class Reason(enum.StrEnum):
        EXIT = "exit"

    line = LineRenderer()(
        None, "notice", {"level": "notice", "event": "run.ended", "end_reason": Reason.EXIT}
    )
    assert line == "[notice   ] run.ended                      end_reason=exit"


def test_a_record_without_pairs_is_not_padded() -> None:
    line = LineRenderer()(None, "warning", {"level": "warning", "event": "launcher.stopped"})
    assert line == "[warning  ] launcher.stopped"


def test_text_that_could_forge_a_line_is_written_as_a_repr() -> None:
    forged = "ok\n2026-12-01T00:00:00Z [error    ] launcher.hacked"
    line = LineRenderer()(
        None, "info", {"level": "info", "event": "run.note\r", "note": forged, "tab": "a\tb"}
    )
    assert "\n" not in line
    assert "\r" not in line
    assert "\t" not in line
    assert f"note={forged!r}" in line
    assert "'run.note\\r'" in line


def test_launcher_lines_under_serve_are_one_line_each_with_the_traceback_after(
    console_logging: object, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging()  # stderr is captured by capsys here: not a terminal
    log = structlog.get_logger("runlane.launcher")
    log.info("run.finished", run_id="r1", job="noop", note="first\nsecond")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("run.supervisor_crashed", run_id="r2")
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(
        r"\S+Z \[info     \] run\.finished {18} job=noop note='first\\nsecond' run_id=r1",
        lines[0],
    )
    assert re.fullmatch(r"\S+Z \[error    \] run\.supervisor_crashed +run_id=r2", lines[1])
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: boom"
