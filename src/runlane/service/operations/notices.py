"""Notices: what an operation tells the person besides its result (no launcher is running, the
launchers run an older catalog, a followed run is kept for repair), decided here once for every
face. A face shows each as a warning line; the API returns them with the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runlane.core.runs import Run, RunStatus
from runlane.ports import Heartbeat
from runlane.service.runtime import Runtime

NoticeLevel = Literal["warning", "note", "info"]  # info: a plain line, no label


@dataclass(frozen=True, slots=True)
class Notice:
    """One line for the person: a stable `code` (for programs) and the `message` (for people).
    The message may hold anybody's text (a job name, a note): a terminal face escapes it."""

    code: str
    message: str
    level: NoticeLevel = "warning"


NO_LAUNCHER = Notice("no_launcher", "no launcher is running; start one with `runlane serve`")


async def live_launchers_now(rt: Runtime) -> list[Heartbeat]:
    """The launchers whose heartbeat is recent (each judged by its own interval)."""
    from runlane.service.catalog_stamp import live_launchers

    return live_launchers(
        await rt.store.launchers(), await rt.store.now(), rt.settings.launcher_stale_after
    )


async def no_launcher_notices(rt: Runtime) -> tuple[Notice, ...]:
    """`no_launcher` when no launcher has beaten lately: nothing will start a queued run."""
    return () if await live_launchers_now(rt) else (NO_LAUNCHER,)


async def abandoned_run_notice(rt: Runtime, run: Run) -> Notice | None:
    """`no_launcher` for a running run whose launcher has stopped (its lease expired) when no
    launcher is running to take it over: a person following it would wait in silence. None
    otherwise (a live lease, a row without one such as an SDK scope's, a live launcher that
    will take the run over)."""
    if run.status is not RunStatus.RUNNING or run.lease_expires_at is None:
        return None
    if run.lease_expires_at > await rt.store.now() or await live_launchers_now(rt):
        return None
    return Notice(
        "no_launcher",
        f"run {run.id}'s launcher {run.lease_owner or '?'} has stopped (its lease expired at "
        f"{run.lease_expires_at.isoformat(timespec='seconds')}) and no launcher is running to "
        "take the run over; start one with `runlane serve`",
    )


def nobody_knows_notice(rt: Runtime, run: Run, live: list[Heartbeat]) -> Notice | None:
    """`launchers_lack_job` when live launchers run and the catalog of every one lacks the
    queued run's job (loaded before the job was added, or another file): the run waits (kept
    for repair) until a launcher on a catalog with the job runs."""
    from runlane.service.catalog_stamp import catalog_digest, nobody_knows, nobody_knows_message

    if run.status is not RunStatus.QUEUED or not nobody_knows(run.job, live):
        return None
    file_digest = catalog_digest(rt.catalog) if rt.catalog is not None else None
    message = nobody_knows_message(run.job, live, rt.settings.catalog_path, file_digest)
    return Notice(
        "launchers_lack_job",
        f"{message}; run {run.id} waits until `runlane serve` is restarted on a catalog that "
        "has the job",
    )


async def queued_run_notices(rt: Runtime, runs: list[Run], *, always: bool = True) -> list[Notice]:
    """What `run` and `emit` say of the runs they queued: `no_launcher` (for `emit`, only when
    one of them is queued: `always=False`), then `launchers_lack_job` for each queued run."""
    live = await live_launchers_now(rt)
    found: list[Notice] = []
    if not live and (always or any(r.status is RunStatus.QUEUED for r in runs)):
        found.append(NO_LAUNCHER)
    for run in runs:
        notice = nobody_knows_notice(rt, run, live)
        if notice is not None:
            found.append(notice)
    return found


async def chain_notices(rt: Runtime, chain: str) -> list[Notice]:
    """What `chain run` says: `no_launcher`, or `launchers_lack_chain` when live launchers run
    and none of them has `chain` (see `catalog_stamp.chain_warning`)."""
    from runlane.service.catalog_stamp import catalog_digest, chain_warning

    live = await live_launchers_now(rt)
    if not live:
        return [NO_LAUNCHER]
    message = chain_warning(
        chain, live, catalog_digest(rt.require_catalog()), rt.settings.catalog_path
    )
    return [] if message is None else [Notice("launchers_lack_chain", message)]


def repair_notice(run: Run, catalog_path: str, *, in_file: bool | None, known_live: bool) -> str:
    """What `run --wait` and `logs --follow` say, once, when a launcher keeps the run they
    follow for repair: what happened and what to do. They keep waiting.

    For `unknown_job`: `in_file` tells whether the catalog file defines the job (None: not
    read), `known_live` whether a live launcher has it now (restarted since)."""
    from runlane.service.catalog_stamp import at_seconds

    next_try = f" ({at_seconds(run.not_before)})" if run.not_before else ""
    if run.error_code == "unknown_job":
        if in_file is False:
            return (
                f"run {run.id} is kept for repair: job {run.job!r} is not in {catalog_path} "
                f"either; cancel it (`runlane cancel {run.id}`) or add the job back"
            )
        if known_live:
            return (
                f"run {run.id} went back to the queue: the launcher that claimed it did not know "
                f"job {run.job!r}; a launcher running now has the job and starts the run at its "
                f"next try{next_try}"
            )
        if in_file is None:
            return (
                f"run {run.id} waits: the launcher that claimed it does not know job "
                f"{run.job!r} and keeps the run for repair; if the job was added to the catalog "
                f"since, restart `runlane serve`: the restarted launcher starts the run at once"
            )
        return (
            f"run {run.id} waits for a restart: the launcher that claimed it loaded {catalog_path} "
            f"before job {run.job!r} was added and keeps the run for repair; restart `runlane "
            f"serve`: the restarted launcher starts the run at once"
        )
    if run.error_code == "corrupt_params":
        return (
            f"run {run.id} is kept for repair: its stored params are not valid JSON, so no "
            f"launcher will start it; cancel it (`runlane cancel {run.id}`) and queue a new one"
        )
    return (
        f"run {run.id} is kept for repair ({run.error_code}: {run.note or 'no note'}); see "
        f"`runlane doctor`; next try{next_try or ' later'}"
    )


async def kept_for_repair_notice(rt: Runtime, run: Run) -> Notice:
    """`kept_for_repair`: why the followed run waits (see `repair_notice`)."""
    in_file = None if rt.catalog is None else run.job in rt.catalog.jobs
    live = await live_launchers_now(rt)
    known_live = any(h.catalog_jobs is not None and run.job in h.catalog_jobs for h in live)
    notice = repair_notice(run, rt.settings.catalog_path, in_file=in_file, known_live=known_live)
    return Notice("kept_for_repair", notice)
