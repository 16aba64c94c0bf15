"""A catalog changed while runs exist: launchers restarted on a catalog without a job, or with an
edited one, end the runs of the old one clearly. SQLite and PostgreSQL."""

from __future__ import annotations

from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings

from .conftest import CATALOG, running_launcher


def catalog_without(job: str) -> Catalog:
    """The tests' catalog with `job` removed, as after an edit."""
    kept: list[str] = []
    inside = False
    for line in CATALOG.splitlines(keepends=True):
        if line.startswith(f"  {job}:"):
            inside = True
            continue
        if inside and line.startswith("    "):
            continue
        inside = False
        kept.append(line)
    return parse_catalog_text("".join(kept))


async def test_a_run_taken_over_for_a_job_the_catalog_lost_ends_launcher_lost_not_requeued(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    # `long` runs under a launcher that then dies; the one started in its place (on a catalog
    # without `long`) takes the run over once the lease has expired.
    run_id = (await accept_run(store, catalog, RunRequest(job="long", trigger=Trigger.CLI))).run.id
    [claimed] = await store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    assert claimed.run.id == run_id
    async with running_launcher(store, catalog_without("long"), settings) as events:
        await events.wait("finished", run_id, within=10)
    run = await store.get_run(run_id)
    # It ran: it is not queued again as the same attempt (with its start forgotten), to run a
    # second time when the job comes back; it was lost, and its next attempt (`long` has 2) is
    # the one kept for the job to come back.
    assert (run.status, run.end_reason, run.error_code) == (
        RunStatus.FAILURE,
        "launcher_lost",
        "launcher_lost",
    )
    assert run.started_at is not None
    rows = await store.list_runs(RunFilter(job="long", limit=10))
    [retry] = [r for r in rows if r.id != run_id]
    assert (retry.attempt, retry.retry_of, retry.status) == (2, run_id, RunStatus.QUEUED)
