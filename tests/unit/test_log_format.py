"""The libraries' own log records (psycopg's pool during a database outage, asyncio) come out in
the launcher's format: with RUNLANE_LOG_FORMAT=json every line on stderr is one JSON object."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from runlane.cli.logging import configure_logging


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    root.handlers, root.level = handlers, level
    structlog.reset_defaults()


def _crash(database_url: str) -> None:
    raise RuntimeError("boom")


def test_library_records_are_json_lines_in_json_mode(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], restore_logging: object
) -> None:
    monkeypatch.setenv("RUNLANE_LOG_FORMAT", "json")
    monkeypatch.setenv("RUNLANE_LOG_LEVEL", "info")
    configure_logging()
    pool = logging.getLogger("psycopg.pool")
    pool.info("returning connection to %r", "pool-1")  # below warning: left out
    pool.warning("error connecting in %r: %s", "pool-1", "connection refused")
    try:
        _crash("postgresql://alice:" + "s3cret" + "pw@db/x")
    except RuntimeError:
        logging.getLogger("asyncio").exception("Exception in callback")
    structlog.get_logger("runlane.launcher").info("launcher.start", launcher="L1")
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert [r["event"] for r in records] == [
        "error connecting in 'pool-1': connection refused",
        "Exception in callback",
        "launcher.start",
    ]
    assert records[0]["level"] == "warning"
    assert records[0]["logger"] == "psycopg.pool"
    assert records[0]["timestamp"].endswith("Z")
    assert "RuntimeError: boom" in records[1]["exception"]
    assert "s3cretpw" not in "\n".join(lines)  # no frame locals in library tracebacks either


def test_library_records_use_the_console_format_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], restore_logging: object
) -> None:
    monkeypatch.setenv("RUNLANE_LOG_FORMAT", "console")
    monkeypatch.delenv("RUNLANE_LOG_LEVEL", raising=False)
    configure_logging()
    configure_logging()  # configured twice (tests, embedding): still one line per record
    logging.getLogger("psycopg.pool").warning("error connecting in %r", "pool-1")
    err = capsys.readouterr().err
    assert err.count("error connecting in 'pool-1'") == 1
    assert "warning" in err
    assert "psycopg.pool" in err
