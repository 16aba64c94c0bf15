"""A run that ran is recorded as it ended, whatever its output holds: NUL bytes and invalid UTF-8
(which PostgreSQL refuses in text) are stored replaced, and an outcome the database refuses
anyway is saved without its texts instead of crashing its supervisor, which would leave the run
to be retried as `launcher_lost` and run twice. SQLite and the real PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import StoreError
from runlane.ports import FinishedRun, FinishRequest, RunFilter, Store
from runlane.service.accept import RunRequest
from runlane.service.config import Settings

from .conftest import run_to_end


def cli(job: str) -> RunRequest:
    return RunRequest(job=job, trigger=Trigger.CLI)


PY = sys.executable
CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m, max_attempts: 2}}
jobs:
  binary:
    command: [{PY}, -c, "import sys; sys.stdout.buffer.write(b'side effect done \\\\x00 \\\\xff\\\\xfe end\\\\n')"]
  poison:
    command: [{PY}, -c, "print('POISON')"]
  plain:
    command: [{PY}, -c, "print('plain')"]
"""


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


class RefusesPoison:
    """The real store, except that finish_many refuses any batch holding a "POISON" log tail,
    as a database refuses a value it cannot store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        if any("POISON" in (r.outcome.log_tail or "") for r in requests):
            self.refused += 1
            raise StoreError("value refused by the database")
        return await self._store.finish_many(requests)


async def test_nul_bytes_and_invalid_utf8_in_output_are_stored_replaced(
    store: Store, catalog_file: Path, settings: Settings
) -> None:
    catalog = load_catalog(catalog_file)
    [run_id] = await run_to_end(store, catalog, settings, [cli("binary")])
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS
    assert run.attempt == 1
    assert run.log_tail == "side effect done \ufffd \ufffd\ufffd end\n"
    rows = await store.list_runs(RunFilter(job="binary", limit=10))
    assert [r.id for r in rows] == [run_id]  # no retry: it ran once and succeeded


async def test_a_refused_outcome_is_saved_without_its_texts_and_spares_the_batch(
    store: Store, catalog_file: Path, settings: Settings
) -> None:
    catalog = load_catalog(catalog_file)
    wrapped = RefusesPoison(store)
    ids = await run_to_end(wrapped, catalog, settings, [cli(j) for j in ["poison", *["plain"] * 6]])
    assert wrapped.refused >= 1
    runs = {run_id: await store.get_run(run_id) for run_id in ids}
    assert {r.status for r in runs.values()} == {RunStatus.SUCCESS}
    poisoned = runs[ids[0]]
    assert poisoned.log_tail is None
    assert poisoned.note is not None
    assert "could not be stored" in poisoned.note
    for run_id in ids[1:]:
        assert runs[run_id].log_tail == "plain\n"
    every = await store.list_runs(RunFilter(limit=100))
    assert sorted(r.id for r in every) == sorted(ids)  # nothing retried, nothing lost
