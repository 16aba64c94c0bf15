"""What runs get as RUNLANE_DATABASE_URL: a relative SQLite path made absolute, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlane.service.wiring import absolute_url


def test_relative_sqlite_paths_become_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_url("sqlite:///runlane.db") == f"sqlite:///{tmp_path / 'runlane.db'}"
    assert absolute_url("sqlite:///./d/../x.db") == f"sqlite:///{tmp_path / 'x.db'}"
    assert absolute_url("x.db") == f"sqlite:///{tmp_path / 'x.db'}"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////abs/runlane.db",
        "sqlite:///:memory:",
        "sqlite:///file:runs.db?mode=rw",
        "postgresql://runlane@db/runlane",
    ],
)
def test_other_urls_are_left_alone(url: str) -> None:
    assert absolute_url(url) == url
