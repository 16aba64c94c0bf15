"""A crash logged by the launcher shows the traceback but never the frames' local variables,
which hold database URLs with passwords, lease tokens and params."""

from __future__ import annotations

import pytest
import structlog

from runlane.cli.logging import configure_logging


def _crash(database_url: str, lease_token: str) -> None:
    raise RuntimeError("boom")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_logged_tracebacks_carry_no_locals(
    fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNLANE_LOG_FORMAT", fmt)
    monkeypatch.setenv("RUNLANE_LOG_LEVEL", "info")
    configure_logging()
    # Built at run time: the traceback's source lines must not be what carries them.
    password, token = "s3cret" + "pw", "0a744a93" + "-6b38-4b49-9eef-ad8b2b8bf262"
    url = f"postgresql://alice:{password}@db/x"
    try:
        log = structlog.get_logger("test")
        try:
            _crash(url, token)
        except RuntimeError:
            log.exception("run.supervisor_crashed", run_id="r1")
        err = capsys.readouterr().err
    finally:
        structlog.reset_defaults()
    assert "run.supervisor_crashed" in err
    assert "RuntimeError: boom" in err  # the traceback is still there
    assert "_crash" in err
    assert "s3cretpw" not in err
    assert "0a744a93" not in err
